"""The continuous scheduler's live decode (service/scheduling/runners.py LiveRunner) in an engine worker process
(service/execution/remote.py). The process holds the decoding state; the scheduler's sentence keys stay here (the
process sees small integers), with what each sentence joined with, so that a sentence can join again.

When the worker process dies under a live decode, the sentences it held that do not stream, and were not sent again
before, join the new process's decode from their start (a translation is idempotent;
``mt_engine_retried_batches_total`` counts each such re-join); those that stream (their tokens went out already)
and those sent again once already fail with EngineRestarted (503 with Retry-After; a stream's final error event),
returned in the step's ``failed``.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Hashable
from typing import Any

from core.search import length_limits
from engine.chooser import decodes_live
from engine.decoding import TranslateOptions
from engine.live_rows import StepOutput
from service.execution.channel import Channel, WorkerDied
from service.execution.work import Source
from service.scheduling.errors import EngineRestarted


class Lost(Exception):
    """The worker process that held the live sentences is gone."""


class RemoteLive:
    def __init__(self, worker: Any) -> None:
        """``worker``: the ProcessEngineWorker (its current channel, generation, engine facade, metrics)."""
        self.worker = worker
        self._generation = worker.generation
        self._joined: dict[int, tuple[Hashable, list[int], TranslateOptions, bool]] = {}  # the process's key -> ...
        self._ids: dict[Hashable, int] = {}  # our key -> the process's
        self._retried: set[int] = set()  # the process's keys of sentences sent again already
        self._failed: list[tuple[Hashable, Exception]] = []  # lost with a process during a join: the next step says so
        self._next = itertools.count()
        self._rows = 0

    @property
    def holding(self) -> bool:
        return bool(self._joined)

    @property
    def bytes_per_position(self) -> int:
        return int(self.worker.engine.info["bytes_per_position"])

    @property
    def rows(self) -> int:
        return self._rows if self._generation == self.worker.generation else 0

    @staticmethod
    def accepts(options: Any, streaming: bool = False) -> bool:
        return decodes_live(options, streaming)

    def cost(self, options: TranslateOptions, source: Source) -> tuple[int, int]:
        engine = self.worker.engine
        limit = length_limits([source.length], engine.max_source_tokens, options.max_length)[0]
        return options.beam_size, limit

    # --- calls ---------------------------------------------------------------------------------
    def _channel(self) -> Channel:
        """The current process's channel; Lost when the sentences held here were on an earlier one."""
        generation, channel = self.worker.current()
        if generation != self._generation:
            if self._joined:
                raise Lost
            self._generation, self._rows = generation, 0
        return channel

    def _call(self, op: str, *args: Any) -> Any:
        generation = self._generation
        channel = self._channel()
        try:
            return channel.call(op, *args)
        except WorkerDied as exc:
            raise Lost from exc
        except Exception as exc:
            self.worker.check(generation, exc)
            raise

    def _add(self, items: list[tuple[Hashable, list[int], TranslateOptions, bool]]) -> list:
        """Register sentences and join them on the current process; (process key, sentence) of each."""
        sentences = []
        for item in items:
            i = next(self._next)
            self._joined[i], self._ids[item[0]] = item, i
            sentences.append((i, *item[1:]))
        return sentences

    def join(self, items: list[tuple[Hashable, TranslateOptions, Source, bool]]) -> tuple[list[tuple[Any, Any]], float]:
        sentences = self._add([(key, source.ids, options, stream) for key, options, source, stream in items])
        try:
            done, encode_s, self._rows = self._call("join", sentences)
        except Lost:
            out = self._recover()
            self._failed += out.failed
            return out.finished, 0.0
        return [(self._forget(i), result) for i, result in done], encode_s

    def _forget(self, i: int) -> Hashable:
        key = self._joined.pop(i)[0]
        self._ids.pop(key, None)
        self._retried.discard(i)
        return key

    def leave(self, key: Hashable) -> bool:
        i = self._ids.get(key)
        if i is None:
            return False
        self._forget(i)
        try:
            removed, self._rows = self._call("leave", i)
        except (Lost, EngineRestarted):
            return False  # the process that held it is gone: nothing to free there
        return removed

    def step(self) -> StepOutput:
        try:
            out, self._rows = self._call("step")
        except Lost:
            out = self._recover()
        else:
            out.progress = {self._joined[i][0]: tokens for i, tokens in out.progress.items() if i in self._joined}
            out.finished = [(self._forget(i), result) for i, result in out.finished]
        out.failed, self._failed = [*self._failed, *out.failed], []
        if not self._joined:
            self.worker.after_call()
        return out

    def _recover(self) -> StepOutput:
        """The process died under the live decode: sentences that do not stream and were not sent again yet join the
        new process's decode from their start; the others fail (``failed``). Raises EngineRestarted when no process
        comes back."""
        held = [(i, self._joined[i]) for i in list(self._joined)]
        again = [item for i, item in held if not item[3] and i not in self._retried]
        failed = [item[0] for i, item in held if item[3] or i in self._retried]
        self._clear(self.worker.current()[0])  # waits for the new process
        out = StepOutput()
        if again:
            sentences = self._add(again)
            self._retried.update(i for i, *_ in sentences)
            self.worker.metrics.engine_retried_batches.labels(self.worker.model).inc()
            try:
                done, _, self._rows = self._channel().call("join", sentences)
                out.finished = [(self._forget(i), result) for i, result in done]
            except (WorkerDied, Lost):  # that one died too: they fail now
                failed += [item[0] for item in again]
                self._clear(self._generation)
        error = EngineRestarted(self.worker.retry_after)
        out.failed = [(key, error) for key in failed]
        out.rows = self._rows
        return out

    def _clear(self, generation: int) -> None:
        self._joined.clear()
        self._ids.clear()
        self._retried.clear()
        self._rows, self._generation = 0, generation

    def reset(self) -> None:
        """Drop everything live (after a failed step the state is not trusted)."""
        if self._generation == self.worker.generation and not self.worker.restarting:
            with contextlib.suppress(Lost, EngineRestarted):
                self._call("reset")
        self._failed = []
        self._clear(self.worker.generation)
