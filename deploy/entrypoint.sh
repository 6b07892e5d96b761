#!/usr/bin/env bash
# The one entry command of the service: Dockerfile ENTRYPOINT, docker compose and Kubernetes all run it.
#   MT_PORT=8000 bash deploy/entrypoint.sh             (from the repository root, serving venv on PATH)
#   PYTHON=.venv-serve/bin/python bash deploy/entrypoint.sh
# It prints the effective settings (never the API keys), then replaces itself with the server
# (`exec`), so SIGTERM from `docker stop` or the kubelet reaches the server and starts its drain.
set -euo pipefail

PYTHON="${PYTHON:-python}"
cd "$(dirname "$0")/.."

# Effective settings as the service will resolve them (environment + defaults). Secrets are shown
# as a count only. Best effort: if this fails, the server itself reports the configuration error.
"$PYTHON" - <<'PY' || echo "entrypoint: could not resolve settings; starting the service anyway" >&2
import os
import re

SECRET = re.compile(r"(KEYS?|SECRETS?|PASSWORDS?|TOKEN)$", re.IGNORECASE)  # API_KEYS yes, MAX_BATCH_TOKENS no


def shown(name, value):
    if SECRET.search(name):
        count = len(value) if isinstance(value, list) else len([v for v in str(value).split(",") if v.strip()])
        return f"<{count} configured, hidden>"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return value


values, source = None, "service.settings"
try:
    from service.settings import Settings, every_setting, setting
except Exception as exc:  # not importable: show the raw environment
    print(f"entrypoint: service.settings unavailable ({exc.__class__.__name__}: {exc})")
else:
    try:
        settings = Settings()
        values = {env[3:].lower(): setting(settings, env) for env in every_setting()}
    except Exception as exc:  # invalid values: name them (not their contents, which may be secret)
        errors = exc.errors(include_input=False) if hasattr(exc, "errors") else [{"msg": str(exc), "loc": ()}]
        for error in errors:
            where = "MT_" + "_".join(str(part) for part in error["loc"]).upper()
            print(f"entrypoint: invalid setting {where}: {error['msg']} (the service will refuse to start)")
if values is None:
    values = {k[3:].lower(): v for k, v in os.environ.items() if k.startswith("MT_")}
    source = "environment, unvalidated"
print(f"entrypoint: effective settings ({source}):")
for name in sorted(values):
    print(f"  MT_{name.upper()}={shown(name, values[name])}")
PY

echo "entrypoint: exec $PYTHON -m service" >&2
exec "$PYTHON" -m service "$@"
