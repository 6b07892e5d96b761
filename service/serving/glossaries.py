"""Stored glossaries: validated, kept in the state store (namespace "glossaries"), owned by an API key.

A glossary is a record ``{glossary_id, name, source_language, target_language, entries: [[source, target]...],
entry_count, creation_time, owner}`` under its id. ``owner`` is the label of the API key that created it
(service/access/keys.py; "" when the server has no API keys): a key sees, uses and deletes only its own glossaries, and
another key's id answers 404 as an id that never existed would, so ids do not leak between keys. Without API keys
everyone is the same owner. Each owner may keep ``MT_GLOSSARIES_PER_KEY`` glossaries, counted by an atomic
counter of the store (two replicas cannot both create the last one).

Validation (``GlossaryInvalid``, 422 with the field to change): at least one entry and at most
``MT_GLOSSARY_MAX_ENTRIES``; no empty term (after trimming whitespace) and none longer than
``MT_GLOSSARY_MAX_TERM_CHARS``; no term with a line break or tab; no two source terms that match the same text
(the same after case folding, as source matching ignores case); a language pair some loaded model serves.
TSV (``source<TAB>target`` a line) and CSV (two columns, RFC 4180 quoting) uploads are parsed by ``parse_entries``.
"""

from __future__ import annotations

import csv
import io
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from service.serving.terms import TermsError
from service.state.store import Record, StateStore

NAMESPACE = "glossaries"
FORMATS = ("tsv", "csv")


class GlossaryInvalid(TermsError):
    """A glossary that cannot be stored or used (422); ``field`` names what to change."""


class GlossaryNotFound(LookupError):
    """No glossary of this id for this owner (404)."""


class GlossaryLimit(Exception):
    """The owner already keeps the most glossaries allowed (409)."""


@dataclass(frozen=True)
class GlossaryLimits:
    max_entries: int = 5000
    max_term_chars: int = 200
    per_owner: int = 100


def parse_entries(text: str, fmt: str) -> list[tuple[str, str]]:
    """(source, target) pairs of a TSV or CSV text; a line without exactly two fields is a GlossaryInvalid naming it.
    Blank lines are skipped."""
    if fmt not in FORMATS:
        raise GlossaryInvalid(f"entries_format must be one of {', '.join(FORMATS)}, not {fmt!r}", "entries_format")
    rows = [line.split("\t") for line in text.splitlines()] if fmt == "tsv" else list(csv.reader(io.StringIO(text)))
    pairs = []
    for number, row in enumerate(rows, start=1):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != 2:
            raise GlossaryInvalid(
                f"line {number} of the {fmt.upper()} entries has {len(row)} field(s); each line needs a source term "
                "and a target term",
                "entries",
            )
        pairs.append((row[0], row[1]))
    return pairs


def check_entries(pairs: Iterable[tuple[str, str]], limits: GlossaryLimits, field: str = "entries") -> dict[str, str]:
    """The entries as {source: target}, trimmed, or GlossaryInvalid saying what is wrong."""
    entries: dict[str, str] = {}
    folded: dict[str, str] = {}
    for source, target in pairs:
        if not isinstance(source, str) or not isinstance(target, str):
            raise GlossaryInvalid("glossary terms must be strings", field)
        source, target = source.strip(), target.strip()
        if not source or not target:
            raise GlossaryInvalid(f"empty term in the entry {source!r} -> {target!r}: both terms need text", field)
        for term in (source, target):
            if len(term) > limits.max_term_chars:
                raise GlossaryInvalid(
                    f"term {term[:40]!r}... has {len(term)} characters; the limit is {limits.max_term_chars}", field
                )
            if any(c in term for c in "\t\r\n"):
                raise GlossaryInvalid(f"term {term!r} holds a tab or line break", field)
        key = " ".join(source.casefold().split())
        if key in folded:
            raise GlossaryInvalid(
                f"duplicate source term {source!r} (also given as {folded[key]!r}; matching ignores case)", field
            )
        folded[key] = source
        entries[source] = target
        if len(entries) > limits.max_entries:
            raise GlossaryInvalid(f"more than {limits.max_entries} entries; split the glossary", field)
    return entries


def check_spans(spans: Iterable[str], limits: GlossaryLimits) -> list[str]:
    """do_not_translate spans: non-empty (not only whitespace), within the term limit, at most max_entries."""
    out = list(spans)
    if len(out) > limits.max_entries:
        raise GlossaryInvalid(f"more than {limits.max_entries} do_not_translate spans", "do_not_translate")
    for span in out:
        if not span.strip():
            raise GlossaryInvalid("a do_not_translate span is empty", "do_not_translate")
        if len(span) > limits.max_term_chars:
            raise GlossaryInvalid(
                f"do_not_translate span {span[:40]!r}... has {len(span)} characters; the limit is "
                f"{limits.max_term_chars}",
                "do_not_translate",
            )
    return out


def public(record: Record, with_entries: bool = False) -> dict[str, Any]:
    """What the API shows of a stored glossary (never its owner)."""
    out = {k: record[k] for k in ("glossary_id", "name", "source_language", "target_language", "entry_count")}
    out["creation_time"] = record["creation_time"]
    if with_entries:
        out["entries"] = dict(record["entries"])
    return out


class Glossaries:
    """The stored glossaries of one state store, per owner."""

    def __init__(self, store: StateStore, limits: GlossaryLimits) -> None:
        self.store, self.limits = store, limits

    async def create(
        self, owner: str, name: str, pair: tuple[str, str], entries: dict[str, str], served: Iterable[tuple[str, str]]
    ) -> Record:
        if not name.strip():
            raise GlossaryInvalid("a glossary needs a name", "name")
        if tuple(pair) not in set(served):
            listed = ", ".join(f"{s}->{t}" for s, t in sorted(set(served)))
            raise GlossaryInvalid(
                f"no model translates {pair[0]}->{pair[1]}; this server translates {listed}", "source_language"
            )
        if not entries:
            raise GlossaryInvalid("a glossary needs at least one entry", "entries")
        counted = await self.store.add(NAMESPACE, f"count:{owner}", 1, self.limits.per_owner)
        if not counted.accepted:
            raise GlossaryLimit(
                f"this key already keeps {counted.value} glossaries, the limit (MT_GLOSSARIES_PER_KEY); "
                "delete one first"
            )
        record = {
            "glossary_id": uuid.uuid4().hex,
            "name": name.strip(),
            "source_language": pair[0],
            "target_language": pair[1],
            "entries": [[s, t] for s, t in entries.items()],
            "entry_count": len(entries),
            "creation_time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "owner": owner,
        }
        try:
            await self.store.put(NAMESPACE, f"glossary:{record['glossary_id']}", record)
        except BaseException:
            await self.store.add(NAMESPACE, f"count:{owner}", -1)
            raise
        return record

    async def get(self, owner: str, glossary_id: str) -> Record:
        record = await self.store.get(NAMESPACE, f"glossary:{glossary_id}")
        if record is None or record.get("owner") != owner:
            raise GlossaryNotFound(f"no glossary {glossary_id!r}; list yours with GET /v1/glossaries")
        return record

    async def list(self, owner: str) -> list[Record]:
        records = await self.store.records(NAMESPACE)
        mine = [r for k, r in records.items() if k.startswith("glossary:") and r.get("owner") == owner]
        return sorted(mine, key=lambda r: (r["creation_time"], r["glossary_id"]))

    async def delete(self, owner: str, glossary_id: str) -> None:
        await self.get(owner, glossary_id)
        if await self.store.delete(NAMESPACE, f"glossary:{glossary_id}"):
            await self.store.add(NAMESPACE, f"count:{owner}", -1)
