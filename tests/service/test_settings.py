"""Every MT_* setting keeps its name and its default, and is read from its own environment variable: the list as it
was before the settings were grouped (issue 35). A setting added, renamed or with a new default changes it here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.settings import REPO_ROOT, Settings, every_setting, setting

DEFAULTS = {
    "MT_HOST": "127.0.0.1",
    "MT_PORT": 8000,
    "MT_MODEL_REPOSITORY": REPO_ROOT / "model_repository",
    "MT_DEFAULT_MODEL": "de-en",
    "MT_MODELS": [],
    "MT_MODEL_VERSIONS": {},
    "MT_DIRECTION_MODELS": {},
    "MT_ADMIN_KEY": "",
    "MT_PROVIDERS": "auto",
    "MT_VARIANT": "auto",
    "MT_INTRA_OP_THREADS": 1,
    "MT_INTER_OP_THREADS": 1,
    "MT_ENGINE_WORKERS": 1,
    "MT_ENGINE_PROCESS": False,
    "MT_ENGINE_MEMORY_LIMIT_MB": 0.0,
    "MT_SHORTLIST": True,
    "MT_SEARCH_LOOP": True,
    "MT_FUSED_STEP": "auto",
    "MT_SCHEDULER": "dynamic",
    "MT_BATCHING": True,
    "MT_MAX_BATCH_SENTENCES": 32,
    "MT_MAX_BATCH_TOKENS": 4096,
    "MT_MAX_WAIT_MS": 5.0,
    "MT_DISPATCH_WHEN_IDLE": True,
    "MT_MAX_QUEUE_SENTENCES": 1024,
    "MT_MAX_LIVE_ROWS": 128,
    "MT_MAX_CACHE_MB": 512.0,
    "MT_REQUEST_TIMEOUT_S": 30.0,
    "MT_MAX_REQUEST_TIMEOUT_S": 120.0,
    "MT_DRAIN_SECONDS": 20.0,
    "MT_KEEP_ALIVE_S": 75.0,
    "MT_LOAD_DELAY_S": 0.0,
    "MT_HEADER_TIMEOUT_S": 10.0,
    "MT_BODY_TIMEOUT_S": 30.0,
    "MT_MAX_CONNECTIONS": 4096,
    "MT_MAX_HEADER_BYTES": 16384,
    "MT_MAX_HEADERS": 100,
    "MT_MAX_URL_BYTES": 8192,
    "MT_LANGUAGE_MISMATCH": "warn",
    "MT_MAX_BODY_BYTES": 1048576,
    "MT_MAX_TEXTS_TRANSLATE": 64,
    "MT_MAX_TEXTS_EMBED": 256,
    "MT_MAX_CHARS_PER_TEXT": 2000,
    "MT_MAX_TOKENS_PER_TEXT": 250,
    "MT_MAX_BEAM_SIZE": 8,
    "MT_MAX_LENGTH_CAP": 255,
    "MT_API_KEYS": [],
    "MT_KEY_RATE_PER_S": 0.0,
    "MT_KEY_BURST": 10,
    "MT_KEY_QUEUE_SHARE": 0.5,
    "MT_KEY_CHARACTER_LIMIT": 0,
    "MT_KEY_CHARACTER_LIMITS": {},
    "MT_OPEN_PATHS": ["/healthz", "/readyz", "/metrics"],
    "MT_CORS_ORIGINS": [],
    "MT_LOG_LEVEL": "info",
    "MT_LOG_REQUESTS_TEXT": False,
    "MT_V2_API": True,
    "MT_LIBRETRANSLATE_API": True,
    "MT_DEEPL_API": True,
    "MT_DETECT_LANGUAGES": ["de", "en", "zh"],
    "MT_STATE_DIR": REPO_ROOT / "state",
    "MT_MAX_DOCUMENT_BYTES": 20 << 20,
    "MT_MAX_DOCUMENT_CHARS": 1_000_000,
    "MT_MAX_DOCUMENT_PAGES": 500,
    "MT_DOCUMENT_RETENTION_S": 3600.0,
    "MT_DOCUMENT_WORKERS": 1,
    "MT_REDIS_URL": "",
    "MT_REDIS_TIMEOUT_S": 0.5,
    "MT_REPLICAS": 1,
    "MT_CACHE_MB": 64.0,
    "MT_GLOSSARY_MAX_ENTRIES": 5000,
    "MT_GLOSSARY_MAX_TERM_CHARS": 200,
    "MT_GLOSSARIES_PER_KEY": 100,
}


def test_every_setting_keeps_its_name_and_default():
    assert {env: field.get_default(call_default_factory=True) for env, field in every_setting().items()} == DEFAULTS


def other_value(field, default) -> tuple[str, object]:
    """A valid value other than the default: (as the environment spells it, as the setting holds it)."""
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, int | float):
        limits = {k: getattr(m, k) for m in field.metadata for k in ("le", "ge", "gt") if hasattr(m, k)}
        step = 1 if isinstance(default, int) else 0.25
        value = default + step if default + step <= limits.get("le", default + step) else default - step
        return str(value), value
    if isinstance(default, dict):
        return "de-en=1", {"de-en": "1"}
    if isinstance(default, list):
        return "a, b", ["a", "b"]
    pattern = next((m.pattern for m in field.metadata if getattr(m, "pattern", None)), None)
    if pattern:
        value = next(v for v in re.findall(r"\w+", pattern) if v != default)
        return value, value
    return ("/tmp/elsewhere", Path("/tmp/elsewhere")) if isinstance(default, Path) else ("x", "x")


@pytest.mark.parametrize("env", sorted(DEFAULTS))
def test_each_setting_is_read_from_its_own_environment_variable(monkeypatch, env):
    field = every_setting()[env]
    given, expected = other_value(field, field.get_default(call_default_factory=True))
    monkeypatch.setenv(env, given)
    assert setting(Settings(), env) == expected


def test_no_two_groups_read_the_same_variable():
    names = [name for group in Settings.model_fields.values() for name in group.default_factory.model_fields]
    assert len(names) == len(set(names))


def test_the_older_batching_switch_is_the_scheduler_off(monkeypatch):
    monkeypatch.setenv("MT_SCHEDULER", "continuous")
    monkeypatch.setenv("MT_BATCHING", "false")
    assert Settings().scheduling.scheduler == "off"
