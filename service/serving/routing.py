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

AUTO = "auto"
# detect(text, candidate languages) -> ISO 639-1 code (one of the candidates) or None when unsure
Detector = Callable[[str, Sequence[str]], "str | None"]


class UnservedPair(LookupError):
    """No loaded model serves the asked language pair; ``field`` names the request field to change."""

    def __init__(self, message: str, served: dict[tuple[str, str], str], field: str = "source_language") -> None:
        listed = ", ".join(f"{s}->{t} ({name})" for (s, t), name in sorted(served.items()))
        super().__init__(f"{message}; this server translates {listed}")
        self.field = field


def _pair_model(registry: Registry, source: str | None, target: str | None) -> LoadedModel:
    served = registry.pairs()
    matches = [
        name for (s, t), name in served.items() if (source is None or s == source) and (target is None or t == target)
    ]
    if len(set(matches)) == 1:
        return registry.get(matches[0])
    asked = f"{source or '?'}->{target or '?'}"
    if not matches:
        field = "target_language" if source is not None and any(s == source for s, _ in served) else "source_language"
        raise UnservedPair(f"no model translates {asked}", served, field)
    raise UnservedPair(f"{asked} matches several models; name both languages or the model", served)


def route(
    registry: Registry,
    texts: Sequence[str],
    model: str | None,
    source_language: str | None,
    target_language: str | None,
    detect: Detector | None = None,
) -> tuple[list[LoadedModel], list[str | None]]:
    """(the model of each text, the detected language of each text or None where nothing was detected)."""
    detected: list[str | None] = [None] * len(texts)
    if model is not None:
        chosen = registry.get(model)
        source, target = chosen.languages
        asks = (("source_language", source_language, source), ("target_language", target_language, target))
        for field, asked, has in asks:
            if asked not in (None, AUTO, has):
                message = f"model {chosen.name} translates {source}->{target}, not {field} {asked}"
                raise UnservedPair(message, registry.pairs(), field)
        return [chosen] * len(texts), detected
    if source_language is None and target_language is None:
        return [registry.get(None)] * len(texts), detected
    into_target = {name for (_, t), name in registry.pairs().items() if t == target_language}
    if source_language is not None and source_language != AUTO or source_language is None and len(into_target) < 2:
        return [_pair_model(registry, source_language, target_language)] * len(texts), detected
    if detect is None:
        raise UnservedPair("language detection is not available", registry.pairs())
    sources = sorted({s for s, t in registry.pairs() if target_language is None or t == target_language})
    if not sources:
        raise UnservedPair(f"no model translates into {target_language}", registry.pairs(), "target_language")
    models = []
    for i, text in enumerate(texts):
        language = detect(text, sources) if len(sources) > 1 else sources[0]  # one candidate: nothing to detect
        detected[i] = language if len(sources) > 1 else None
        if language is None:
            message = f"the language of text {i} could not be detected; name source_language"
            raise UnservedPair(message, registry.pairs())
        models.append(_pair_model(registry, language, target_language))
    return models, detected
