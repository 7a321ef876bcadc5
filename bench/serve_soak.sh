#!/usr/bin/env bash
# Soak of `weft serve` (docs/reliability.md): MINUTES of mixed load (SSE through the openai
# client and WebSocket through ws, a third of the requests cut by abort, terminate or cancel),
# sampling the server's RSS and KV pages every SAMPLE_S seconds (default 30). Prints the table
# and a JSON summary; fails if RSS grows by more than SOAK_RSS_MB (default 64) after the first
# fifth of the run, or if KV pages are not back to 0 at the end. Stops by itself.
#   bench/serve_soak.sh MINUTES [BUILD_DIR] [MODEL_DIR]
set -euo pipefail
minutes=${1:?usage: bench/serve_soak.sh MINUTES [BUILD_DIR] [MODEL_DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=$(awk "BEGIN { printf \"%d\", $minutes * 60 }")
PHASES=soak SOAK_S=$seconds SAMPLE_S=${SAMPLE_S:-30} LIMIT_S=$((seconds + 120)) \
  exec "$root/bench/serve_load.sh" "${@:2}"
