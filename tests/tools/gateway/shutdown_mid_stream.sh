#!/usr/bin/env bash
# SIGTERM with --shutdown-timeout 0 while a request streams: the client gets its final chunk with finish_reason
# "shutdown" and `data: [DONE]`, and `weft serve` exits 0 within 5 s.
set -uo pipefail
weft=${1:?usage: shutdown_mid_stream.sh WEFT MODEL}
model=${2:?}
log=$(mktemp); out=$(mktemp)
"$weft" serve --model "$model" --port 0 --threads 1 --shutdown-timeout 0 >"$log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null; rm -f "$log" "$out"' EXIT
for _ in $(seq 300); do grep -q 'on http://' "$log" && break; sleep 0.1; done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -1)
[[ -n $url ]] || { echo "no address:"; cat "$log"; exit 1; }
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The whale","max_tokens":1000,"ignore_eos":true,"stream":true}' >"$out" &
client=$!
for _ in $(seq 100); do [[ $(grep -c '^data: ' "$out") -ge 3 ]] && break; sleep 0.05; done
stop_start=$(date +%s%N)
kill -TERM $server
wait $client
wait $server
status=$?
stop_ms=$((($(date +%s%N) - stop_start) / 1000000))
echo "server exit status $status after ${stop_ms} ms; client got $(grep -c '^data: ' "$out") events; last two:"
tail -n 4 "$out"
grep -q '"finish_reason":"shutdown"' "$out" && tail -n 2 "$out" | grep -q '^data: \[DONE\]$' &&
  [[ $status -eq 0 && $stop_ms -lt 5000 ]] && echo "shutdown mid-stream ok"
