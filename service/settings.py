"""Service settings: environment variables with the MT_ prefix (pydantic-settings); see the README table.

``Settings`` holds them in groups (``settings.scheduling.max_wait_ms``), each group reading its own MT_* variables
when it is built; a variable's name is the field's, whatever its group (MT_MAX_WAIT_MS). ``every_setting`` lists
them all by variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.access.keys import key_label

REPO_ROOT = Path(__file__).resolve().parent.parent


def _split(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


CsvList = Annotated[list[str], NoDecode, BeforeValidator(_split)]  # "a, b" -> ["a", "b"]


def parse_pairs(value: str) -> dict[str, str]:
    """``"a=1, b=2"`` -> ``{"a": "1", "b": "2"}``; ValueError unless every item is name=value."""
    pairs = [item.split("=", 1) for item in _split(value)]  # type: ignore[union-attr]
    if any(len(p) != 2 or not p[0].strip() or not p[1].strip() for p in pairs):
        raise ValueError(f"expected name=value pairs separated by commas, got {value!r}")
    return {k.strip(): v.strip() for k, v in pairs}


def _pairs(value: object) -> object:
    return parse_pairs(value) if isinstance(value, str) else value


CsvMap = Annotated[dict[str, str], NoDecode, BeforeValidator(_pairs)]  # "a=1, b=2" -> {"a": "1", "b": "2"}


_BOOL = TypeAdapter(bool)


def _auto_or_bool(value: object) -> object:
    """A tri-state setting's value: "auto", or a boolean as pydantic reads one (true/1/yes/on ...) as "true" /
    "false" (the setting was a boolean before it had auto); anything else is left for the field's pattern to
    refuse."""
    word = value.strip().lower() if isinstance(value, str) else value
    if word == "auto":
        return word
    try:
        return str(_BOOL.validate_python(word)).lower()
    except ValidationError:
        return value


class SettingsGroup(BaseSettings):
    """A group of settings, each read from MT_<FIELD NAME>."""

    model_config = SettingsConfigDict(env_prefix="MT_", extra="ignore")


class ServerSettings(SettingsGroup):
    """Where the process listens, how it starts and stops, what it logs."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    drain_seconds: float = Field(20.0, ge=0)
    load_delay_s: float = Field(0.0, ge=0, description="wait before loading models (tests, staged roll-outs)")
    log_level: str = "info"
    log_requests_text: bool = False


class RepositorySettings(SettingsGroup):
    """Which models are served, in which versions, and who may load another."""

    model_repository: Path = REPO_ROOT / "model_repository"
    default_model: str = "de-en"
    models: CsvList = Field(default_factory=list, description="models to load; empty = every model in the repository")
    model_versions: CsvMap = Field(
        default_factory=dict, description="pinned versions, e.g. 'de-en=1'; unpinned models serve their highest version"
    )
    direction_models: CsvMap = Field(
        default_factory=dict,
        description="which model answers a direction that several models serve, e.g. 'zh-en=zh-en,en-de=multi'; "
        "empty = the model repository's own file 'direction-models' where a release wrote one; a direction named in "
        "neither goes to the default model, else to the first model by name",
    )
    admin_key: str = Field(
        "",
        description="key for the admin calls (X-Admin-Key): POST /v1/models/{name}/load, "
        "/v2/repository/models/{name}/load and /unload; empty = admin off",
    )


class EngineSettings(SettingsGroup):
    """How each model's engine runs."""

    providers: str = Field("auto", pattern="^(auto|cpu|cuda)$")
    variant: str = Field("auto", pattern="^(auto|fp32|int8|fp16)$")
    intra_op_threads: int = Field(1, ge=1, le=256)
    inter_op_threads: int = Field(1, ge=1, le=256)
    engine_workers: int = Field(1, ge=1, le=64, description="batches run concurrently per model")
    engine_process: bool = Field(
        False,
        description="each model's engine (onnxruntime sessions, searches, fused operators, the live decode) runs in "
        "a worker process of its own: a crash there (a segfault in native code) costs a restart of that process, "
        "not the service; false = in the server process (docs/deployment.md, engine worker processes)",
    )
    engine_memory_limit_mb: float = Field(
        0.0,
        ge=0,
        description="MT_ENGINE_PROCESS: a worker process whose resident memory passed this many MiB is replaced "
        "between batches; 0 = no limit",
    )
    shortlist: bool = Field(
        True,
        description="search over the bundle's lexical shortlist when it has one (the most frequent target subwords and "
        "the likely translations of the batch's source subwords); false = always the whole vocabulary",
    )
    search_loop: bool = Field(
        True,
        description="a lone sentence's greedy or beam search runs in the bundle's search loop graph, one onnxruntime "
        "call (bundles exported since it exists; same hypotheses); false = step by step in Python. With "
        "MT_SCHEDULER=continuous it serves the whole batches only (the live decode serves the rest); its session is "
        "created on first use",
    )
    fused_step: Annotated[str, BeforeValidator(_auto_or_bool)] = Field(
        "auto",
        pattern="^(auto|true|false)$",
        description="whole-batch search runs the int8 decoder step as one fused onnxruntime operator "
        "(native/fused_step/, built by `make native`; MT_FUSED_STEP_LIBRARY names another build) where the bundle's "
        "step graph is one it computes; else, or without the library, the step graph as before. auto: where the "
        "library is built and the CPU has AVX-512 VNNI or AVX2 with FMA (measured faster there); true: on any CPU; "
        "false: never. Its "
        "float parts are not onnxruntime's bit for bit: scores may move by a few hundredths "
        "(docs/engine-speed-log.md items 45, 48)",
    )


class SchedulingSettings(SettingsGroup):
    """Batching: which scheduler, its batches, its queue and, for continuous batching, the live decode's budgets."""

    scheduler: str = Field(
        "dynamic",
        pattern="^(continuous|dynamic|off)$",
        description="continuous: sentences join the running decode at every step and leave the step they finish; "
        "dynamic: whole batches formed within MT_MAX_WAIT_MS and decoded to their end; off: one sentence at a time",
    )
    batching: bool = Field(True, description="false = MT_SCHEDULER=off (the older switch)")
    max_batch_sentences: int = Field(32, ge=1, le=4096)
    max_batch_tokens: int = Field(4096, ge=16)
    max_wait_ms: float = Field(
        5.0,
        ge=0,
        le=10_000,
        description="dynamic: how long the oldest waiting sentence waits for companions while every engine worker is "
        "busy (with MT_DISPATCH_WHEN_IDLE, an idle worker takes the queue at once)",
    )
    dispatch_when_idle: bool = Field(
        True,
        description="dynamic: an idle engine worker takes what waits at once (a lone request pays no batching wait); "
        "false = always wait MT_MAX_WAIT_MS or for a full batch",
    )
    max_queue_sentences: int = Field(1024, ge=1)
    max_live_rows: int = Field(128, ge=1, le=65536, description="continuous: rows of one decoder step (beam 4 = 4)")
    max_cache_mb: float = Field(
        512.0, gt=0, description="continuous: the padded key/value cache the live sentences may reach, MiB"
    )

    @model_validator(mode="after")
    def _older_switch(self) -> SchedulingSettings:
        """MT_BATCHING=false is MT_SCHEDULER=off, resolved here once."""
        if not self.batching:
            self.scheduler = "off"
        return self


class ConnectionSettings(SettingsGroup):
    """HTTP connections (service/api/http_protocol.py): slow, idle and malformed clients."""

    keep_alive_s: float = Field(
        75.0,
        gt=0,
        description="idle HTTP keep-alive connections close after this; keep it above clients' pool expiry "
        "(httpx: 5 s) so a client never reuses a connection the server is closing",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a request head must be complete this long after the connection opens (or after its first byte "
        "on a kept-alive connection); else 408 and close (silent close when nothing came)",
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="a request body must be complete this long after its head; else 408 and close"
    )
    max_connections: int = Field(
        4096,
        ge=1,
        description="open HTTP connections; beyond it the oldest idle one is closed, or, when none is idle, the new "
        "one gets 503 with Retry-After (also capped below the process's file-descriptor limit)",
    )
    max_header_bytes: int = Field(16384, ge=1024, description="request line and headers together; beyond it 431")
    max_headers: int = Field(100, ge=1, description="header fields of a request; beyond it 431")
    max_url_bytes: int = Field(8192, ge=256, description="the request target (path and query); beyond it 414")


class LimitSettings(SettingsGroup):
    """What one request may ask for: its deadline, its body, its texts and its search."""

    request_timeout_s: float = Field(30.0, gt=0, description="default deadline of a request")
    max_request_timeout_s: float = Field(120.0, gt=0, description="cap on a deadline a client asks for")
    max_body_bytes: int = Field(1 << 20, ge=1024)
    max_texts_translate: int = Field(64, ge=1)
    max_texts_embed: int = Field(256, ge=1)
    max_chars_per_text: int = Field(2000, ge=1)
    max_tokens_per_text: int = Field(250, ge=1, description="subword tokens per text (EOS excluded)")
    max_beam_size: int = Field(8, ge=1, le=16)
    max_length_cap: int = Field(255, ge=1)


class AccessSettings(SettingsGroup):
    """API keys and their limits, open paths, browsers' origins."""

    api_keys: CsvList = Field(default_factory=list, description="when set, /v1/* needs one of these keys")
    key_rate_per_s: float = Field(
        0.0,
        ge=0,
        description="with MT_API_KEYS: work requests per second each key may send (token bucket); beyond it 429 "
        "with Retry-After; 0 = no per-key rate limit",
    )
    key_burst: int = Field(10, ge=1, description="with MT_API_KEYS: requests a key may send at once (bucket size)")
    key_queue_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="with MT_API_KEYS: the share of MT_MAX_QUEUE_SENTENCES one key's waiting sentences may fill "
        "per model; beyond it 429 naming the key's limit",
    )
    key_character_limit: int = Field(
        0,
        ge=0,
        description="characters each API key may have translated, counted in the state store across restarts "
        "(without MT_API_KEYS: the server's one anonymous caller); a translation that would pass it is refused "
        "(DeepL API: 456); 0 = no limit",
    )
    key_character_limits: CsvMap = Field(
        default_factory=dict,
        description="per-key exceptions to MT_KEY_CHARACTER_LIMIT, by key label (the first 8 hex digits of the key's "
        "sha256, as logs and metrics name it): 'label=characters, ...'; 0 = no limit",
    )
    open_paths: CsvList = Field(
        default_factory=lambda: ["/healthz", "/readyz", "/metrics"], description="paths that need no API key"
    )
    cors_origins: CsvList = Field(default_factory=list)

    @field_validator("api_keys")
    @classmethod
    def _distinct_labels(cls, keys: list[str]) -> list[str]:
        """Keys are named by their label (service/access/keys.py) in limits, metrics and logs: two must not share
        one."""
        distinct = set(keys)
        if len({key_label(k) for k in distinct}) != len(distinct):
            raise ValueError("two API keys share the first 8 hex digits of their sha256; replace one of them")
        return keys

    @field_validator("key_character_limits")
    @classmethod
    def _counts(cls, limits: dict[str, str]) -> dict[str, str]:
        for label, value in limits.items():
            if not value.isdigit():
                raise ValueError(f"MT_KEY_CHARACTER_LIMITS: the limit of {label} must be a whole number, got {value!r}")
        return limits


class LanguageSettings(SettingsGroup):
    """Language detection and what a text in another language than its model's gets."""

    language_mismatch: str = Field(
        "warn",
        pattern="^(warn|reject|off)$",
        description="a text the language detector places in another language than its model's source: "
        "warn (a language_mismatch warning), reject (422), or off (no check: the detector's CPU saved on every "
        "text; /detect and 'auto' sources still detect)",
    )
    detect_languages: CsvList = Field(
        default_factory=lambda: ["de", "en", "zh"],
        description="ISO 639-1 codes POST /detect chooses among (lingua, offline); 'auto' sources choose among the "
        "served source languages",
    )


class ProtocolSettings(SettingsGroup):
    """Other protocols (docs/protocols.md): Open Inference Protocol v2 under /v2, LibreTranslate's API at the root."""

    v2_api: bool = Field(True, description="serve the Open Inference Protocol v2 (KServe / Triton clients) under /v2")
    libretranslate_api: bool = Field(True, description="serve LibreTranslate's /translate, /detect and /languages")
    deepl_api: bool = Field(
        True, description="serve the DeepL API's /v2/translate, /v2/languages and /v2/usage (DeepL clients)"
    )


class StateSettings(SettingsGroup):
    """Where state that outlives a request is kept (service/state/): stored glossaries, document jobs, quotas; with
    Redis, shared by replicas (and the translation cache with them)."""

    state_dir: Path = Field(
        REPO_ROOT / "state",
        description="directory of the embedded state store (SQLite and files), kept across restarts; in the image a "
        "volume",
    )
    redis_url: str = Field(
        "",
        description="Redis shared by replicas (redis://[:password@]host:6379/0): records, counters, key rate limits, "
        "the translation cache, model version announcements; empty = the embedded store (one replica)",
    )
    redis_timeout_s: float = Field(
        0.5, gt=0, le=30, description="deadline of one Redis call; beyond it the replica degrades to its local state"
    )
    replicas: int = Field(
        1,
        ge=1,
        description="replicas sharing the state: while Redis is down each replica limits a key to "
        "MT_KEY_RATE_PER_S / MT_REPLICAS",
    )
    cache_mb: float = Field(
        64.0,
        ge=0,
        description="translation cache bound, MiB (exact repeats skip the queue); in process, or in Redis with "
        "MT_REDIS_URL (shared); 0 = no cache",
    )

    glossary_max_entries: int = Field(
        5000, ge=1, description="entries of one glossary, stored or inline (docs/glossaries.md); beyond it 422"
    )
    glossary_max_term_chars: int = Field(200, ge=1, description="characters of one glossary term; beyond it 422")
    glossaries_per_key: int = Field(
        100, ge=1, description="stored glossaries per API key (per server without API keys); beyond it 409"
    )


class DocumentSettings(SettingsGroup):
    """Document translation (docs/documents.md): what an upload may hold, how long results are kept."""

    max_document_bytes: int = Field(20 << 20, ge=1024, description="largest uploaded file; beyond it 413")
    max_document_chars: int = Field(
        1_000_000, ge=1, description="text characters a document may hold (its translatable text); beyond it 413"
    )
    max_document_pages: int = Field(500, ge=1, description="slides a presentation may hold; beyond it 413")
    document_retention_s: float = Field(
        3600.0, gt=0, description="a finished or failed job and its files are deleted this long after it ended"
    )
    document_workers: int = Field(1, ge=1, le=64, description="documents translated at once by one process")


class Settings(BaseModel):
    """Every setting, in its group; ``Settings()`` reads the environment (each group its own variables)."""

    server: ServerSettings = Field(default_factory=ServerSettings)
    repository: RepositorySettings = Field(default_factory=RepositorySettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    scheduling: SchedulingSettings = Field(default_factory=SchedulingSettings)
    connections: ConnectionSettings = Field(default_factory=ConnectionSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    languages: LanguageSettings = Field(default_factory=LanguageSettings)
    protocols: ProtocolSettings = Field(default_factory=ProtocolSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)


def _groups() -> dict[str, type[SettingsGroup]]:
    return {name: field.default_factory for name, field in Settings.model_fields.items()}  # type: ignore[misc]


def every_setting() -> dict[str, FieldInfo]:
    """Every setting by its environment variable (MT_<NAME>): its field (type, default, description)."""
    return {f"MT_{name.upper()}": f for group in _groups().values() for name, f in group.model_fields.items()}


def setting(settings: Settings, env: str) -> Any:
    """The value of the setting read from ``env`` (MT_<NAME>)."""
    name = env.removeprefix("MT_").lower()
    group = next(g for g, cls in _groups().items() if name in cls.model_fields)
    return getattr(getattr(settings, group), name)
