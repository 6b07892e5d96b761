#!/usr/bin/env bash
# Log a process's resident memory once a minute (or every $2 seconds) until it exits: "HH:MM:SS <VmRSS kB>".
#   scripts/watch_rss.sh $(pgrep -f "model.cli train") 60 > /tmp/rss.log &
# docs/models-round3.md ("Training speed") reads the training run's memory this way.
set -euo pipefail
pid=${1:?usage: scripts/watch_rss.sh PID [SECONDS]}
every=${2:-60}
while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null) || break
    echo "$(date +%T) $rss"
    sleep "$every"
done
