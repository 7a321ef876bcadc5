#!/usr/bin/env bash
# Load and faults on `weft serve` (docs/reliability.md, "Server under load and faults"): starts
# the server on a free loopback port with a CPU model and runs bench/serve_load.js against it.
#   bench/serve_load.sh [BUILD_DIR] [MODEL_DIR]   (defaults: build/release, models/weft-tiny)
# Environment: PHASES (default streams,cancel,slow), STREAMS (256), MAX_TOKENS (32), STORM (256)
# and the others of serve_load.js; SERVE_ARGS adds options to `weft serve`; THREADS for the
# forward pass (default 1); SEND_TIMEOUT_S for --send-timeout-s (default 5).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
model=${2:-$root/models/weft-tiny}
weft=$build/bin/weft
[[ -x $weft ]] || { echo "serve_load: no $weft; build first" >&2; exit 1; }
node_dir=$build/test-node
bash "$root/tests/tools/gateway/setup_node.sh" "$node_dir" >/dev/null
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
log=$(mktemp)
# shellcheck disable=SC2086
"$weft" serve --model "$model" --port 0 --threads "${THREADS:-1}" --kv-budget-mb 1024 \
  --max-running 512 --socket-send-buffer-bytes 8192 --send-timeout-s "${SEND_TIMEOUT_S:-5}" ${SERVE_ARGS:-} >"$log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do
  grep -q 'on http://' "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -1)
echo "serve_load: weft serve at $url (pid $server), $(nproc) cores, model $model" >&2
set +e
PHASES=${PHASES:-streams,cancel,slow} STREAMS=${STREAMS:-256} MAX_TOKENS=${MAX_TOKENS:-32} \
  STORM=${STORM:-256} SLOW=${SLOW:-8} WEFT_URL=$url WEFT_SERVER_PID=$server WEFT_NODE=$node_dir \
  node "$root/bench/serve_load.js"
status=$?
kill -TERM $server
wait $server
server_status=$?
[[ $server_status -eq 0 ]] || { echo "FAIL weft serve exited with $server_status"; cat "$log"; exit 1; }
exit "$status"
