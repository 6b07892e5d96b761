"""What the middleware tells from a request's path alone: its metrics label, whether it queues engine work, and the
form its protocol's errors take."""

from __future__ import annotations

import re

WORK_PATHS = ("/v1/translate", "/v1/embed", "/v1/attention")  # requests that queue engine work
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")  # open by default (MT_OPEN_PATHS), closable with API keys
KNOWN_ENDPOINTS = {
    "/v1/translate", "/v1/embed", "/v1/attention", "/v1/models", "/v1/documents", "/healthz", "/readyz", "/metrics", "/"
}  # fmt: skip
# uploads of whole files (service/api/documents.py): their body limit is MT_MAX_DOCUMENT_BYTES
DOCUMENT_UPLOAD_PATHS = ("/v1/documents", "/translate_file")
# Open Inference Protocol v2 (service/api/v2.py) and the LibreTranslate API (service/api/libretranslate.py):
# their errors are {"error": ...}; v2 needs an API key like /v1, LibreTranslate's key is checked in its handlers.
LIBRETRANSLATE_PATHS = ("/translate", "/detect", "/languages", "/health", "/translate_file")
# DeepL's API lives under /v2 too, beside the inference protocol (no path collides): its paths, by prefix, answer
# DeepL's error form {"message": ...}; every other /v2 path is the inference protocol's, {"error": ...}
DEEPL_PREFIXES = ("/v2/translate", "/v2/languages", "/v2/usage", "/v2/glossaries", "/v2/glossary-language-pairs",
                  "/v2/document", "/v2/write")  # fmt: skip
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
    if path in KNOWN_ENDPOINTS or path in LIBRETRANSLATE_PATHS:
        return path
    for pattern, label in _V2_ENDPOINTS:
        if pattern.match(path):
            return label or path
    return "other"


def is_work_path(path: str) -> bool:
    """Requests that queue engine work (refused up front with 429 when every queue is full)."""
    return path in WORK_PATHS or path == "/translate" or _V2_ENDPOINTS[0][0].match(path) is not None


def is_protected(path: str) -> bool:
    """Paths that need an API key when MT_API_KEYS is set (unless listed in MT_OPEN_PATHS)."""
    return path.startswith(("/v1/", "/v2/")) or path == "/v2" or path in OPERATIONS_PATHS


def is_deepl_path(path: str) -> bool:
    """A path of DeepL's API (whose errors are {"message": ...})."""
    return any(path == p or path.startswith(p + "/") for p in DEEPL_PREFIXES)


def is_inference_protocol_path(path: str) -> bool:
    """A path of the Open Inference Protocol: /v2 and below, but DeepL's paths."""
    return (path == "/v2" or path.startswith("/v2/")) and not is_deepl_path(path)


def error_body(path: str, message: str, status: int = 0) -> dict:
    """An error in the form of the path's protocol: {"error": ...} for the inference protocol and LibreTranslate
    (whose 429 says "Slowdown: ..."), {"message": ...} for DeepL's, else {"detail": ...}."""
    if path in LIBRETRANSLATE_PATHS:
        return {"error": ("Slowdown: " if status == 429 else "") + message}
    if is_deepl_path(path):
        return {"message": message}
    if is_inference_protocol_path(path):
        return {"error": message}
    return {"detail": message}
