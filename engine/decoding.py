"""A translation's decoding options: one typed object, filled once, read everywhere after.

A protocol (/v1, DeepL, LibreTranslate, the Open Inference Protocol, documents) fills ``TranslateOptions`` from its
own fields with ``TranslateOptions.request`` (a field the request leaves out is None; a protocol without a beam field
names the server's cap, ``max_beam_size``); the serving layer then resolves it once against the model version that
runs it (``resolve``: the bundle's ``DecodingDefaults``, its manifest's "decoding"), and the scheduler, the worker and
every search read the resolved object (``is_resolved``), as TGI's NextTokenChooserParameters or vLLM's
SamplingParams. The defaults are written once, in core/search.py (``DEFAULT_BEAM``, ``DEFAULT_LENGTH_PENALTY``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from core.search import DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY, LengthPenalty


def decoding_defaults(manifest: dict) -> dict:
    """A bundle's defaults of the decoding options a request leaves None: its manifest's "decoding" (written by
    ``python -m export.cli decoding``; an imported checkpoint's ``beam_size`` and ``max_length`` by ``import-hf``)
    over the engine's own (no n-gram block). GET /v1/models shows it as it is."""
    return {"no_repeat_ngram_size": 0, **manifest.get("decoding", {})}


def beam_within(max_beam_size: int) -> int | None:
    """The beam of a protocol without a beam field (DeepL, LibreTranslate): the model's default (None) unless the
    server's cap allows less than /v1's default (DEFAULT_BEAM), then the cap."""
    return None if max_beam_size >= DEFAULT_BEAM else max_beam_size


@dataclass(frozen=True)
class DecodingDefaults:
    """A bundle's defaults, typed: what ``TranslateOptions.resolve`` fills in."""

    beam_size: int = DEFAULT_BEAM
    max_length: int | None = None
    no_repeat_ngram_size: int = 0
    length_penalty_form: str = "gnmt"
    length_penalty: float = DEFAULT_LENGTH_PENALTY  # an imported checkpoint's (HF Marian 1.0, Argos 0.2), else 0.6

    @classmethod
    def of(cls, decoding: dict[str, Any]) -> DecodingDefaults:
        """From a manifest's "decoding" (``decoding_defaults``)."""
        max_length = decoding.get("max_length")
        return cls(
            beam_size=int(decoding.get("beam_size", DEFAULT_BEAM)),
            max_length=None if max_length is None else int(max_length),
            no_repeat_ngram_size=int(decoding.get("no_repeat_ngram_size", 0)),
            length_penalty_form=str(decoding.get("length_penalty_form", "gnmt")),
            length_penalty=float(decoding.get("length_penalty", DEFAULT_LENGTH_PENALTY)),
        )


@dataclass(frozen=True)
class TranslateOptions:
    """Decoding options of a translation; frozen, as the scheduler batches by equal options."""

    # None (a request that leaves it out): the bundle's default (``resolve``: its manifest's "decoding", an imported
    # checkpoint's num_beams; DEFAULT_BEAM when it has none), at least num_hypotheses
    beam_size: int | None = 1
    # generated tokens; None: the bundle's default (an imported checkpoint's max_length), else 2 * source tokens + 10
    max_length: int | None = None
    num_hypotheses: int = 1
    # None (a request that leaves it out): the bundle's default (``resolve``)
    length_penalty: float | None = DEFAULT_LENGTH_PENALTY
    return_attention: bool = False
    constrained: bool = False  # its sources carry constraints: whole batches only (no live decode)
    # > 0: no n-gram of this size twice in a hypothesis (engine/no_repeat.py; every search but the constrained
    # ones: not applied to sentences with constraints). 0: off. None: the bundle's default (``resolve``: its
    # manifest's "decoding", 0 when it has none)
    no_repeat_ngram_size: int | None = None
    # how length_penalty ranks beams (core/search.py LengthPenalty): None until resolved, then the bundle's form
    length_penalty_form: str | None = None

    @classmethod
    def request(
        cls,
        *,
        beam_size: int | None = None,
        max_length: int | None = None,
        num_hypotheses: int = 1,
        length_penalty: float | None = None,
        no_repeat_ngram_size: int | None = None,
        return_attention: bool = False,
        max_beam_size: int | None = None,
    ) -> TranslateOptions:
        """What a protocol's request asks (None: left to the model). ``max_beam_size``: the server's cap, for a
        protocol without a beam field (``beam_within``)."""
        if beam_size is None and max_beam_size is not None:
            beam_size = beam_within(max_beam_size)
        return cls(
            beam_size=beam_size,
            max_length=max_length,
            num_hypotheses=num_hypotheses,
            length_penalty=length_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size,
            return_attention=return_attention,
        )

    @property
    def is_resolved(self) -> bool:
        return self.length_penalty_form is not None

    def resolve(self, defaults: DecodingDefaults) -> TranslateOptions:
        """These options with what they leave None set from the bundle's defaults: the n-gram block, the beam (at
        least num_hypotheses), the length limit (when the bundle names one) and the length penalty's form. Options
        already resolved are returned as they are (the model version that resolved them runs them)."""
        if self.is_resolved:
            return self
        changes: dict[str, Any] = {"length_penalty_form": defaults.length_penalty_form}
        if self.no_repeat_ngram_size is None:
            changes["no_repeat_ngram_size"] = defaults.no_repeat_ngram_size
        if self.beam_size is None:
            changes["beam_size"] = max(defaults.beam_size, self.num_hypotheses)
        if self.max_length is None and defaults.max_length is not None:
            changes["max_length"] = defaults.max_length
        if self.length_penalty is None:
            changes["length_penalty"] = defaults.length_penalty
        return replace(self, **changes)

    @property
    def penalty(self) -> LengthPenalty:
        """The length penalty in the bundle's form (resolved options; GNMT's before)."""
        alpha = DEFAULT_LENGTH_PENALTY if self.length_penalty is None else self.length_penalty
        return LengthPenalty(alpha, self.length_penalty_form or "gnmt")
