"""Which model translates each text: by name, by language pair, or by the detected language of each text.

- ``model`` given: that model (languages, when also given, must be its pair).
- ``source_language`` / ``target_language`` (ISO 639-1) given: the model serving that pair; one side alone is
  enough when it names exactly one served pair.
- ``source_language: "auto"``, or left out while the target alone names several models: each text's language is
  detected (among the served source languages) and the text goes to the model of (detected, target); texts of one
  request may go to different models.
- nothing given: the default model.
A pair nobody serves is an UnservedPair (422) that lists the pairs served.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from service.models.registry import LoadedModel, Registry
from service.serving.directions import Routed, in_direction, routed, served_by

AUTO = "auto"
# detect(text, candidate languages) -> ISO 639-1 code (one of the candidates) or None when unsure
Detector = Callable[[str, Sequence[str]], "str | None"]


class UnservedPair(LookupError):
    """No loaded model serves the asked language pair; ``field`` names the request field to change."""

    def __init__(self, message: str, served: dict[tuple[str, str], str], field: str = "source_language") -> None:
        listed = ", ".join(f"{s}->{t} ({name})" for (s, t), name in sorted(served.items()))
        super().__init__(f"{message}; this server translates {listed}")
        self.field = field


def _pair_model(
    registry: Registry, source: str | None, target: str | None, served: dict[tuple[str, str], str]
) -> LoadedModel | Routed:
    """The model of the one pair of ``served`` matching ``source`` / ``target`` (either may be None), in that
    direction (service/serving/directions.py). A source alone that names several directions (a multilingual model's
    de-en and de-zh) goes into the default model's target language, as it did before such models."""
    matches = [(s, t) for s, t in served if (source is None or s == source) and (target is None or t == target)]
    if target is None and len(matches) > 1:
        default = registry.get(None).languages[1]
        matches = [m for m in matches if m[1] == default] or matches
    if len(matches) == 1:
        ((s, t),) = matches
        return routed(registry, served[s, t], s, t)
    asked = f"{source or '?'}->{target or '?'}"
    if not matches:
        field = "target_language" if source is not None and any(s == source for s, _ in served) else "source_language"
        raise UnservedPair(f"no model translates {asked}", registry.pairs(), field)
    raise UnservedPair(f"{asked} matches several models; name both languages or the model", registry.pairs())


def _check_model(registry: Registry, chosen: LoadedModel, source: str | None, target: str | None) -> None:
    """UnservedPair when the named model serves no direction of the asked languages."""
    mine = served_by(chosen)
    listed = ", ".join(f"{s}->{t}" for s, t in mine)
    for field, asked, side in (("source_language", source, 0), ("target_language", target, 1)):
        if asked not in (None, AUTO) and all(pair[side] != asked for pair in mine):
            raise UnservedPair(f"model {chosen.name} translates {listed}, not {field} {asked}", registry.pairs(), field)


def route(
    registry: Registry,
    texts: Sequence[str],
    model: str | None,
    source_language: str | None,
    target_language: str | None,
    detect: Detector | None = None,
) -> tuple[list[LoadedModel], list[str | None]]:
    """(the model of each text, in its direction; the detected language of each text or None where nothing was
    detected). A named model routes among its own directions, exactly as the server does among all."""
    detected: list[str | None] = [None] * len(texts)
    served = registry.pairs()
    if model is not None:
        chosen = registry.get(model)
        _check_model(registry, chosen, source_language, target_language)
        if source_language in (None, AUTO) and target_language is None:
            return [chosen] * len(texts), detected  # its own pair, as before multilingual models
        served = served_by(chosen)
    elif source_language is None and target_language is None:
        return [registry.get(None)] * len(texts), detected
    into_target = {pair for pair in served if pair[1] == target_language}
    if source_language is not None and source_language != AUTO or source_language is None and len(into_target) < 2:
        return [_pair_model(registry, source_language, target_language, served)] * len(texts), detected
    if detect is None:
        raise UnservedPair("language detection is not available", registry.pairs())
    sources = sorted({s for s, t in served if target_language is None or t == target_language})
    if not sources:
        raise UnservedPair(f"no model translates into {target_language}", registry.pairs(), "target_language")
    models = []
    for i, text in enumerate(texts):
        language = detect(text, sources) if len(sources) > 1 else sources[0]  # one candidate: nothing to detect
        detected[i] = language if len(sources) > 1 else None
        if language is None:
            message = f"the language of text {i} could not be detected; name source_language"
            raise UnservedPair(message, registry.pairs())
        models.append(_pair_model(registry, language, target_language, served))
    return models, detected


def in_languages(model: LoadedModel, source: str | None, target: str | None) -> LoadedModel | Routed:
    """A named model in the direction ``source`` / ``target`` name (either may be None; ``auto`` is no language here):
    its own pair when neither is given or both fit it, else the one direction of its own that fits. UnservedPair
    (listing its directions) when none or several do (the Open Inference Protocol's parameters)."""
    own = model.languages
    source = None if source == AUTO else source
    if source in (None, own[0]) and target in (None, own[1]):
        return model
    mine = served_by(model)
    matches = [(s, t) for s, t in mine if source in (None, s) and target in (None, t)]
    if len(matches) == 1:
        return in_direction(model, "-".join(matches[0]))
    asked = f"{source or '?'}->{target or '?'}"
    why = "matches several of its directions; name both languages" if matches else "is not among its directions"
    field = "target_language" if source is not None and any(s == source for s, _ in mine) else "source_language"
    raise UnservedPair(f"{asked} {why} (model {model.name})", mine, field)
