"""Request and response bodies of the v1 API. Limits come from the settings, so /openapi.json states them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator

from core.bundle import TRAINED_HERE
from core.search import DEFAULT_BEAM
from service.settings import LimitSettings

Matrix = list[list[float]]
Heads = list[Matrix]
Layers = list[Heads]

DE_EXAMPLE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


class Hypothesis(BaseModel):
    text: str
    score: float


class TranslationWarning(BaseModel):
    code: str
    message: str


class TranslationOut(BaseModel):
    text: str
    score: float = Field(description="sum of the log-probabilities of the generated tokens, EOS included")
    source_tokens: list[str] = Field(description="source subwords, </s> last")
    target_tokens: list[str] = Field(description="generated subwords (</s> excluded)")
    hypotheses: list[Hypothesis] | None = Field(None, description="n-best list, best first (num_hypotheses > 1)")
    alignment: list[tuple[int, int]] | None = Field(
        None, description="[source_index, target_index] pairs from head- and layer-mean cross-attention"
    )
    attention: Layers | None = Field(
        None, description="cross-attention [layers][heads][target][source]; row j is the step that generated token j"
    )
    model: str | None = Field(None, description="the model that translated this text")
    version: str | None = Field(None, description="the version of that model")
    detected_language: str | None = Field(None, description="the text's language when source_language was 'auto'")
    pivot: str | None = Field(
        None, description='the language the text went through when its direction is served by pivot ("en")'
    )
    pivot_text: str | None = Field(None, description="the translation into the pivot language, which was translated on")
    confidence: float | None = Field(
        None,
        description="estimated probability that this translation is good (chrF >= the model's fitted threshold), "
        "from the model's score; absent when the model has no fitted map or the text is empty, and when the text was "
        "translated under glossary or do_not_translate constraints (then with the warning confidence_unavailable: "
        "forced subwords make the score no measure of quality)",
    )
    warnings: list[TranslationWarning] | None = Field(
        None,
        description="what to know about this translation: language_mismatch, truncated, low_confidence, "
        "confidence_unavailable, unknown_characters, multiple_sentences, glossary_term_missing, "
        "do_not_translate_missing (empty list when none)",
    )


class TranslateResponse(BaseModel):
    model: str
    version: str | None = Field(None, description="version of the model that translated the first text")
    translations: list[TranslationOut]


class EmbedResponse(BaseModel):
    model: str
    version: str | None = None
    dimension: int
    embeddings: list[list[float]]


class AttentionResponse(BaseModel):
    model: str
    version: str | None = None
    source_tokens: list[str]
    target_tokens: list[str] = Field(description="decoder inputs: <s> then the target subwords")
    target_text: str
    score: float
    encoder: Layers | None = Field(None, description="[layers][heads][source][source]")
    decoder: Layers | None = Field(None, description="[layers][heads][target][target]")
    cross: Layers | None = Field(None, description="[layers][heads][target][source]")


class ModelInfo(BaseModel):
    name: str
    version: str
    source_language: str
    target_language: str
    parameters: int
    source: str = Field(
        TRAINED_HERE,
        description=f'where the model came from: "{TRAINED_HERE}", or how it was imported '
        '("imported: huggingface marian")',
    )
    variant: str
    variants: list[str]
    bleu: dict | None
    providers: list[str]
    threads: dict[str, int] | None = Field(
        None, description="onnxruntime threads of the model's sessions, read back from them: intra_op, inter_op"
    )
    search: str | None = Field(
        None,
        description="device: encoder outputs and key/value cache stay on the provider's device (I/O binding, CUDA); "
        "host: in host memory (CPU)",
    )
    fused_step: str | None = Field(
        None,
        description="fused: whole-batch and lone-sentence search run the int8 decoder as the fused operator "
        "(MT_FUSED_STEP); off, or why not (e.g. the library is not built, the CPU has neither AVX-512 VNNI nor AVX2 "
        "under auto)",
    )
    max_source_tokens: int = Field(description="the model's source positions, EOS included")
    max_source_subwords: int | None = Field(
        None,
        description="subwords per text (EOS excluded) a request may send: the model's limit and "
        "MT_MAX_TOKENS_PER_TEXT, the lower; the limit 422 errors name",
    )
    directions: list[dict[str, str]] | None = Field(
        None,
        description="every direction the model serves: source_language, target_language, and its tag (the piece put "
        "before the source) or pivot (served in two legs through that language); the first is the model's own pair",
    )
    layers: dict[str, int]
    heads: int
    dimension: int
    scheduler: str | None = Field(
        None, description="continuous, dynamic or off (continuous needs a bundle with an interface-3 step graph)"
    )
    decoding: dict[str, bool | int | float | str] | None = Field(
        None,
        description="the model's defaults of decoding options a request leaves out (no_repeat_ngram_size: 0 = off; "
        "a model with a repeated-n-gram block decodes whole batches, not continuously; an imported model's "
        "beam_size and max_length, and length_penalty_form: hf, beams ranked by score / n ** length_penalty as "
        "transformers' generate does, where others use GNMT's ((5 + n) / 6) ** length_penalty)",
    )
    versions_available: list[str] | None = Field(None, description="version folders on disk, lowest first")
    version_reason: str | None = Field(None, description="why this version is served")


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelInfo]


def _integral(value: object) -> object:
    """Request models are strict (no "4" for 4, no 1 for true), but JSON Schema counts 2.0 as an integer."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Int = Annotated[int, BeforeValidator(_integral)]


@dataclass
class RequestModels:
    translate: type[BaseModel]
    embed: type[BaseModel]
    attention: type[BaseModel]


def request_models(limits: LimitSettings) -> RequestModels:
    """Request bodies whose bounds are this service's settings."""
    types = _field_types(limits)
    return RequestModels(_translate_request(limits, *types), _embed_request(limits, *types), _attention_request(*types))


def _field_types(limits: LimitSettings) -> tuple[Any, Any, Any]:
    """The bounded field types the request bodies share: a text, a model name, a deadline."""
    Text = Annotated[str, StringConstraints(max_length=limits.max_chars_per_text)]
    ModelName = Annotated[str | None, Field(None, max_length=200, description="model name; default model when absent")]
    Timeout = Annotated[
        float | None,
        Field(
            None,
            gt=0,
            le=3600,
            description=f"deadline in seconds (capped at {limits.max_request_timeout_s}); "
            "also settable with the X-Request-Timeout header",
        ),
    ]
    return Text, ModelName, Timeout


def _n_best_within_beam(body: Any) -> Any:
    """A translate request's n-best list fits its beam."""
    if body.beam_size is not None and body.num_hypotheses > body.beam_size:
        raise ValueError(f"num_hypotheses ({body.num_hypotheses}) must not exceed beam_size ({body.beam_size})")
    return body


NO_REPEAT_DOC = (
    "> 0: no n-gram of this many subwords twice in a translation (stops a translation that "
    "loops on a syllable or phrase, as CTranslate2's option of that name); 0: off; absent: the model's default "
    "(`decoding` in GET /v1/models). Not applied to sentences with glossary terms or do-not-translate spans"
)

GLOSSARY_DOC = (
    "source term -> target term: the translation uses each target term where its source term is "
    "found (whole words, case ignored but for acronyms, German noun endings and umlaut plurals matched); "
    "a term it cannot place is named in warnings (glossary_term_missing). See docs/glossaries.md"
)

PROTECT_SPANS_DOC = (
    "URLs, e-mail addresses, paths, @handles, #hashtags, versions, identifiers, inline code and "
    "emoji are copied exactly and numbers written in the target's convention (German 1.250.000 -> English "
    "1,250,000); one it could not place is a warning (protected_span_missing, number_mismatch). false: the "
    "model alone decides. See docs/real-world-text.md"
)

PROTECT_NAMES_DOC = (
    "names of the source (German: capitalised words the word lists call names; Chinese: persons, "
    "places and organisations) must be in the translation, copied or in their English form (a name table "
    "from CC-CEDICT, else pinyin: 马云 -> Ma Yun); a translation that lost one is searched again with it "
    "required, and one still missing is a warning (name_missing). false: the model alone decides. See "
    "docs/real-world-text.md"
)

STREAM_DOC = (
    "answer text/event-stream: delta events {index, text} as each text is decoded (their "
    "concatenation is the final text), a translation event {index, translation} per text, then done "
    "(errors after the first event: an error event {code, detail}); see the README"
)


def _translate_request(limits: LimitSettings, Text, ModelName, Timeout) -> type[BaseModel]:
    class TranslateRequest(BaseModel):
        model_config = ConfigDict(
            extra="forbid",
            strict=True,  # types as the schema states them: no "4" for 4, no 1 for true (see _integral)
            json_schema_extra={
                "examples": [{"texts": [DE_EXAMPLE], "beam_size": DEFAULT_BEAM, "return_alignment": True}]
            },
        )
        texts: list[Text] = Field(min_length=1, max_length=limits.max_texts_translate)
        model: ModelName = None
        source_language: str | None = Field(
            None,
            pattern="^([a-z]{2}|auto)$",
            description="ISO 639-1 code of the texts, or 'auto' to detect each text's language; picks the model "
            "serving (source_language, target_language) when `model` is absent",
        )
        target_language: str | None = Field(None, pattern="^[a-z]{2}$", description="ISO 639-1 code to translate into")
        beam_size: Annotated[int, Field(ge=1, le=limits.max_beam_size), BeforeValidator(_integral)] | None = Field(
            None,
            description="absent: the model's default (`decoding` in GET /v1/models: an imported checkpoint's "
            "num_beams), else 4; at least num_hypotheses",
        )
        max_length: Annotated[int, Field(ge=1, le=limits.max_length_cap), BeforeValidator(_integral)] | None = Field(
            None,
            description="generated tokens per text; absent: the model's default (an imported checkpoint's "
            "max_length), else 2 * source subwords + 10",
        )
        num_hypotheses: Int = Field(1, ge=1, le=limits.max_beam_size, description="n-best size, at most beam_size")
        length_penalty: float | None = Field(
            None,
            ge=0.0,
            le=5.0,
            description="beams ranked by score / length penalty; absent: the model's default (`decoding` in GET "
            "/v1/models: an imported model's, Argos packages' 0.2), else 0.6",
        )
        no_repeat_ngram_size: Annotated[int, Field(ge=0, le=32), BeforeValidator(_integral)] | None = Field(
            None,
            description=NO_REPEAT_DOC,
        )
        return_attention: bool = False
        return_alignment: bool = False
        timeout_s: Timeout = None
        split_sentences: bool = Field(
            True,
            description="split each text into sentences (and lines) and translate them one by one; line breaks, blank "
            "lines and surrounding whitespace are kept (N lines in, N lines out)",
        )
        format: Literal["text", "html"] = Field(
            "text", description="html: translate the text of an HTML fragment and keep its markup"
        )
        glossary: dict[str, str] | None = Field(
            None,
            description=GLOSSARY_DOC,
        )
        glossary_id: str | None = Field(
            None,
            max_length=64,
            description="a stored glossary of this API key (POST /v1/glossaries) for the model's language pair; "
            "inline `glossary` entries win over its entries",
        )
        do_not_translate: list[str] | None = Field(
            None,
            description="spans copied verbatim into the translation wherever they occur in a text (exact match)",
        )
        protect_spans: bool = Field(True, description=PROTECT_SPANS_DOC)
        protect_names: bool = Field(True, description=PROTECT_NAMES_DOC)
        stream: bool = Field(False, description=STREAM_DOC)

        _n_best = model_validator(mode="after")(_n_best_within_beam)

    return TranslateRequest


def _embed_request(limits: LimitSettings, Text, ModelName, Timeout) -> type[BaseModel]:
    class EmbedRequest(BaseModel):
        model_config = ConfigDict(
            extra="forbid",
            strict=True,  # types as the schema states them: no "4" for 4, no 1 for true (see _integral)
            json_schema_extra={"examples": [{"texts": [DE_EXAMPLE, "Ein Hund läuft."], "normalize": True}]},
        )
        texts: list[Text] = Field(min_length=1, max_length=limits.max_texts_embed)
        model: ModelName = None
        pooling: Literal["mean", "max"] = "mean"
        normalize: bool = True
        timeout_s: Timeout = None

    return EmbedRequest


def _attention_request(Text, ModelName, Timeout) -> type[BaseModel]:
    class AttentionRequest(BaseModel):
        model_config = ConfigDict(
            extra="forbid",
            strict=True,  # types as the schema states them: no "4" for 4, no 1 for true (see _integral)
            json_schema_extra={"examples": [{"source": DE_EXAMPLE, "kinds": ["cross"], "aggregate": "mean"}]},
        )
        source: Text = Field(description="an empty or whitespace-only source is the empty sentence (</s> alone)")
        target: Text | None = Field(None, description="the model's own greedy translation when absent")
        model: ModelName = None
        source_language: str | None = Field(
            None, pattern="^([a-z]{2}|auto)$", description="with target_language: a direction of a multilingual model"
        )
        target_language: str | None = Field(None, pattern="^[a-z]{2}$", description="as /v1/translate's")
        kinds: list[Literal["encoder", "decoder", "cross"]] = Field(
            default_factory=lambda: ["encoder", "decoder", "cross"], min_length=1, max_length=3
        )
        layers: list[Annotated[int, Field(ge=0), BeforeValidator(_integral)]] | None = Field(
            None,
            min_length=1,
            max_length=64,
            description="layer indices, counted within each kind asked for (the encoder and the decoder may differ in "
            "depth: `layers` of GET /v1/models); all layers when absent",
        )
        heads: list[Annotated[int, Field(ge=0), BeforeValidator(_integral)]] | None = Field(
            None, min_length=1, max_length=64, description="head indices; all heads when absent"
        )
        aggregate: Literal["none", "mean"] = "none"
        timeout_s: Timeout = None

    return AttentionRequest
