"""What the schedulers drive, one Protocol per kind of runner: whole batches, and a live decode.

The engine's runners (service/execution/work.py ``engine_runner``, and service/execution/worker.py, which supervises
both kinds) satisfy
them; the scheduler tests drive fakes. Keys and payloads are opaque here: the work's frozen options and its sources.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

Stats = dict[str, float]  # encode / decode seconds, generated_tokens


class BatchRunner(Protocol):
    def __call__(self, key: Hashable, payloads: list[Any]) -> tuple[list[Any], Stats]:
        """One batch of equal keys: one result per payload, in order, and its stats."""


class StepResult(Protocol):
    """What one decoder step of a live decode produced (engine/live.py StepOutput)."""

    finished: list[tuple[Hashable, Any]]  # (sentence key, result) of the sentences that finished
    progress: dict[Hashable, list[int]]  # sentence key -> tokens that became final (streaming)
    rows: int
    seconds: float
    generated_tokens: int
    failed: list[tuple[Hashable, Exception]]  # (sentence key, why) of sentences that failed alone (a lost worker)


class LiveRunner(Protocol):
    """A live decode on one engine: what the continuous scheduler drives from its engine thread, the only caller."""

    @property
    def bytes_per_position(self) -> int:
        """Cache bytes of one row and one position (the cache budget of admission)."""

    @property
    def rows(self) -> int:
        """Rows of the next step."""

    def accepts(self, key: Hashable, streaming: bool) -> bool:
        """Whether work of this key decodes live, ``streaming``: its request streams its tokens (other work runs as
        whole batches)."""

    def cost(self, key: Hashable, payload: Any) -> tuple[int, int]:
        """(decoder rows, cache positions it may reach) of one sentence."""

    def join(self, items: list[tuple[Hashable, Hashable, Any, bool]]) -> tuple[list[tuple[Any, Any]], float]:
        """(sentence key, work key, payload, stream) join at the next step; returns those answered at once and the
        encoder seconds."""

    def leave(self, key: Hashable) -> bool:
        """Take a sentence out (its rows leave at the next step); False when it is not live."""

    def step(self) -> StepResult:
        """One decoder step for every live row."""

    def reset(self) -> None:
        """Drop everything live (after a failed step the state is not trusted)."""
