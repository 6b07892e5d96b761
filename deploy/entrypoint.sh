#!/usr/bin/env bash
# The one entry command of the service: Dockerfile ENTRYPOINT, docker compose and Kubernetes all run it.
#   MT_PORT=8000 bash deploy/entrypoint.sh             (from the repository root, serving venv on PATH)
#   PYTHON=.venv-serve/bin/python bash deploy/entrypoint.sh
# It logs the effective settings (never the API keys or a Redis password), then replaces itself with the
# server (`exec`), so SIGTERM from `docker stop` or the kubelet reaches the server and starts its drain.
# Every line it prints is a JSON object with the keys of the service's own log lines (service/observability/logs.py:
# time, level, logger, message), logger "entrypoint": log collectors parse the container's log from line one.
set -euo pipefail

PYTHON="${PYTHON:-python}"
cd "$(dirname "$0")/.."

# Effective settings as the service will resolve them (environment + defaults), as one log line with a
# "settings" object. Secrets are shown as a count only. Best effort: if this fails, the server itself
# reports the configuration error.
"$PYTHON" - "$PYTHON" "$@" <<'PY' || printf '{"time": "%s", "level": "warning", "logger": "entrypoint", "message": "could not resolve settings; starting the service anyway"}\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
import json
import os
import re
import sys
import time

# MT_API_KEYS and MT_ADMIN_KEY yes; MT_MAX_BATCH_TOKENS and MT_GLOSSARIES_PER_KEY (a count per key) no
SECRET = re.compile(r"(?<!PER_)(KEYS?|SECRETS?|PASSWORDS?|TOKEN)$", re.IGNORECASE)
URL_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")  # redis://:password@host -> redis://:<hidden>@host


def log(level, message, **fields):
    """One line in service/observability/logs.py's JsonFormatter shape (the service is not imported for it: it may not load)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    entry = {"time": stamp, "level": level, "logger": "entrypoint", "message": message, **fields}
    print(json.dumps(entry, ensure_ascii=False, default=str), flush=True)


def shown(name, value):
    if SECRET.search(name):
        count = len(value) if isinstance(value, list) else len([v for v in str(value).split(",") if v.strip()])
        return f"<{count} configured, hidden>"
    if isinstance(value, str):
        return URL_PASSWORD.sub(r"\1:<hidden>@", value)
    return value


values, source = None, "service.settings"
try:
    from service.settings import Settings, every_setting, setting
except Exception as exc:  # not importable: show the raw environment
    log("warning", f"service.settings unavailable ({exc.__class__.__name__}: {exc})")
else:
    try:
        settings = Settings()
        values = {env: setting(settings, env) for env in every_setting()}
    except Exception as exc:  # invalid values: name them (not their contents, which may be secret)
        errors = exc.errors(include_input=False) if hasattr(exc, "errors") else [{"msg": str(exc), "loc": ()}]
        for error in errors:
            where = "MT_" + "_".join(str(part) for part in error["loc"]).upper()
            log("error", f"invalid setting {where}: {error['msg']} (the service will refuse to start)")
if values is None:
    values = {k: v for k, v in os.environ.items() if k.startswith("MT_")}
    source = "environment, unvalidated"
log("info", f"effective settings ({source})", settings={name: shown(name, values[name]) for name in sorted(values)})
log("info", "exec " + " ".join([sys.argv[1], "-m", "service", *sys.argv[2:]]))
PY

exec "$PYTHON" -m service "$@"
