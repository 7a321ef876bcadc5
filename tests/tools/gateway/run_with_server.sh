#!/usr/bin/env bash
# Starts `weft serve` on a free loopback port with MODEL, runs COMMAND with WEFT_URL
# (http://127.0.0.1:PORT) in its environment, then stops the server with SIGINT and checks
# that it shut down cleanly. Exit status: COMMAND's, or 1 when the server misbehaved.
# WEFT_SERVE_ARGS, when set, adds options to `weft serve` (split on spaces).
set -uo pipefail
weft=${1:?usage: run_with_server.sh WEFT MODEL COMMAND...}
model=${2:?}
shift 2
log=$(mktemp)
# shellcheck disable=SC2086
"$weft" serve --model "$model" --port 0 --threads 1 --shutdown-timeout 3 ${WEFT_SERVE_ARGS:-} >"$log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do
  grep -q 'on http://' "$log" && break
  kill -0 $server 2>/dev/null || { echo "weft serve exited early:"; cat "$log"; exit 1; }
  sleep 0.1
done
address=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -1)
[[ -n $address ]] || { echo "weft serve printed no address:"; cat "$log"; exit 1; }
echo "server at $address"
WEFT_URL=$address WEFT_SERVER_PID=$server "$@"
status=$?
kill -INT $server
for _ in $(seq 100); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
if kill -0 $server 2>/dev/null; then
  echo "weft serve did not stop within 10 s of SIGINT"; exit 1
fi
wait $server
server_status=$?
cat "$log"
[[ $server_status -eq 0 ]] || { echo "weft serve exited with $server_status"; exit 1; }
exit $status
