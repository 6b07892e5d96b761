"""Character quotas: how many characters each API key may have translated, counted in the state store.

The count of a key lives in the store's counters (namespace ``characters``, key = the key's label from
service/access/keys.py, never the key itself), so it survives a restart and is shared by whoever shares the store. A
request's characters are reserved before it is translated, atomically against the limit (two requests, or two
replicas, can never both spend the last characters), and given back when the translation fails: only finished
translations are charged, and a refused request is charged nothing.

Without MT_API_KEYS every caller is one anonymous caller, counted under ``ANONYMOUS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from service.state import StateStore

NAMESPACE = "characters"
ANONYMOUS = "-"  # the counter of a server without API keys (labels are hex digits: no key can be named so)
UNLIMITED = 1_000_000_000_000  # what /v2/usage reports for no limit (DeepL's own figure for accounts without one)


class CharacterLimitExceeded(Exception):
    """A request would take a key past its character limit; nothing was charged."""

    def __init__(self, label: str, asked: int, used: int, limit: int) -> None:
        who = f"API key {label}" if label != ANONYMOUS else "this server"
        super().__init__(
            f"Quota exceeded: {who} has translated {used} of its {limit} characters and this request has {asked} "
            "(MT_KEY_CHARACTER_LIMIT)"
        )
        self.label, self.asked, self.used, self.limit = label, asked, used, limit


@dataclass(frozen=True)
class Usage:
    count: int
    limit: int  # 0 = no limit


@dataclass
class CharacterQuota:
    """Per-key character limits (``default``, and ``per_label`` exceptions; 0 = no limit) over ``store``."""

    store: StateStore
    default: int = 0
    per_label: Mapping[str, int] = field(default_factory=dict)

    def limit_of(self, label: str) -> int:
        return self.per_label.get(label, self.default)

    async def usage(self, label: str) -> Usage:
        label = label or ANONYMOUS
        return Usage(await self.store.counter(NAMESPACE, label), self.limit_of(label))

    async def reserve(self, label: str, characters: int) -> None:
        """Charge ``characters`` to ``label`` now, or raise CharacterLimitExceeded (then nothing is charged)."""
        label = label or ANONYMOUS
        limit = self.limit_of(label)
        change = await self.store.add(NAMESPACE, label, characters, limit if limit > 0 else None)
        if not change.accepted:
            raise CharacterLimitExceeded(label, characters, change.value, limit)

    async def give_back(self, label: str, characters: int) -> None:
        """Undo a reservation whose translation failed."""
        if characters:
            await self.store.add(NAMESPACE, label or ANONYMOUS, -characters)
