#!/usr/bin/env bash
# System tools some tests drive for real (none is needed to serve). Installs only what is missing.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need+=(nginx)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v cc >/dev/null 2>&1 || need+=(gcc)  # native/fused_step/, built by its tests (make native)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-test-tools: missing ${need[*]} and not root; the tests that need them will be skipped" >&2
  exit 0
fi
echo "install-test-tools: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
