"""What the middleware tells from a request's path alone: its metrics label, whether it queues engine work, and the
form its protocol's errors take."""

from __future__ import annotations

import re

WORK_PATHS = ("/v1/translate", "/v1/embed", "/v1/attention")  # requests that queue engine work
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")  # open by default (MT_OPEN_PATHS), closable with API keys
KNOWN_ENDPOINTS = {
    "/v1/translate", "/v1/embed", "/v1/attention", "/v1/models", "/v1/documents", "/healthz", "/readyz", "/metrics", "/"
}  # fmt: skip
# uploads of whole files (service/protocols/v1/documents.py): their body limit is MT_MAX_DOCUMENT_BYTES
DOCUMENT_UPLOAD_PATHS = ("/v1/documents", "/translate_file", "/v2/document")
# Open Inference Protocol v2 (service/protocols/oip/routes.py) and the LibreTranslate API
# (service/protocols/libretranslate/routes.py): their errors are {"error": ...}; v2 needs an API key like /v1,
# LibreTranslate's key is checked in its handlers.
LIBRETRANSLATE_PATHS = ("/translate", "/detect", "/languages", "/health", "/translate_file")
# The DeepL API (service/protocols/deepl/routes.py) under /v2 beside the inference protocol (no path collides): its
# errors are {"message": ...}, a missing or wrong key is 403. The prefixes are DeepL's other resources (glossaries,
# documents), DeepL's wherever they are served; every other /v2 path is the inference protocol's, {"error": ...}.
DEEPL_PATHS = ("/v2/translate", "/v2/languages", "/v2/usage")
DEEPL_PREFIXES = ("/v2/glossaries", "/v2/glossary-language-pairs", "/v2/document", "/v2/write")
_V2_ENDPOINTS = [
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$"), "/v2/models/{name}/infer"),
    (re.compile(r"^/v2/models/stats$"), None),
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/stats$"), "/v2/models/{name}/stats"),
    (re.compile(r"^/v2/repository/models/[^/]+/(load|unload)$"), "/v2/repository/models/{name}/{action}"),
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/ready$"), "/v2/models/{name}/ready"),
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?$"), "/v2/models/{name}"),
    (re.compile(r"^/v2(/health/live|/health/ready|/repository/index)?$"), None),  # the path is its own label
]


def endpoint_label(path: str) -> str:
    """The metrics label of a path: the path of a known endpoint, a template for v2 model paths, else "other"."""
    if path in KNOWN_ENDPOINTS or path in LIBRETRANSLATE_PATHS or path in DEEPL_PATHS:
        return path
    if path.startswith(DEEPL_PREFIXES):
        return next(p for p in DEEPL_PREFIXES if path.startswith(p))
    for pattern, label in _V2_ENDPOINTS:
        if pattern.match(path):
            return label or path
    return "other"


def is_work_path(path: str) -> bool:
    """Requests that queue engine work (refused up front with 429 when every queue is full)."""
    if path in WORK_PATHS or path in ("/translate", "/v2/translate"):
        return True
    return _V2_ENDPOINTS[0][0].match(path) is not None


def is_rate_limited(path: str) -> bool:
    """POSTs a key's rate limit (MT_KEY_RATE_PER_S) counts: work requests and document uploads (whose work runs in
    the background). LibreTranslate's key comes in its body: its handlers check the rate themselves."""
    return is_work_path(path) or path in DOCUMENT_UPLOAD_PATHS


def is_deepl(path: str) -> bool:
    """A path of the DeepL API: its errors are {"message": ...} and a missing key is 403."""
    return any(path == p or path.startswith(p + "/") for p in DEEPL_PATHS + DEEPL_PREFIXES)


def is_protected(path: str) -> bool:
    """Paths that need an API key when MT_API_KEYS is set (unless listed in MT_OPEN_PATHS)."""
    return path.startswith(("/v1/", "/v2/")) or path == "/v2" or path in OPERATIONS_PATHS


def is_inference_protocol_path(path: str) -> bool:
    """A path of the Open Inference Protocol: /v2 and below, but DeepL's paths."""
    return (path == "/v2" or path.startswith("/v2/")) and not is_deepl(path)


def error_body(path: str, message: str, status: int = 0) -> dict:
    """An error in the form of the path's protocol: {"message": ...} for the DeepL API, {"error": ...} for v2 and
    LibreTranslate (whose 429 says "Slowdown: ..."), else {"detail": ...}."""
    if is_deepl(path):
        return {"message": message}
    if path in LIBRETRANSLATE_PATHS:
        return {"error": ("Slowdown: " if status == 429 else "") + message}
    if is_inference_protocol_path(path):
        return {"error": message}
    return {"detail": message}
