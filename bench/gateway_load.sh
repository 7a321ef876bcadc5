#!/usr/bin/env bash
# Gateway load benchmark (docs/PERFORMANCE.md, "Gateway load"): starts `weft serve` on a free
# loopback port with a CPU model, runs bench/gateway_load.js against it (256 WebSocket and
# 256 SSE streams at once by default, then 1000 idle connections), prints its JSON and
# writes it to gateway_load.json in the current folder.
#   bench/gateway_load.sh [BUILD_DIR] [MODEL_DIR]   (defaults: build/release, models/weft-tiny)
# Environment: WS, SSE, MAX_TOKENS, CANCEL_EVERY, IDLE (see gateway_load.js); THREADS for the
# forward pass (default 1, so the gateway's share is easy to see on small machines).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
model=${2:-$root/models/weft-tiny}
weft=$build/bin/weft
[[ -x $weft ]] || { echo "gateway_load: no $weft; build first (scripts/test builds build/release)" >&2; exit 1; }
node_dir=$build/test-node
bash "$root/tests/tools/gateway/setup_node.sh" "$node_dir" >/dev/null
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
log=$(mktemp)
"$weft" serve --model "$model" --port 0 --threads "${THREADS:-1}" --kv-budget-mb 1024 \
  --max-running 512 --max-connections 8192 >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do
  grep -q 'on http://' "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -1)
echo "gateway_load: weft serve at $url (pid $server), $(nproc) cores, model $model" >&2
WEFT_URL=$url WEFT_SERVER_PID=$server WEFT_NODE=$node_dir node "$root/bench/gateway_load.js" |
  tee gateway_load.json.tmp
status=${PIPESTATUS[0]}
grep -v 'all checks passed' gateway_load.json.tmp >gateway_load.json; rm -f gateway_load.json.tmp
exit "$status"
