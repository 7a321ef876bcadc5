#!/usr/bin/env bash
# `weft serve --tensor-parallel 2` under mpirun (docs/parallel.md): a greedy completion over
# HTTP equals `weft generate` in one process; SIGINT to mpirun stops both ranks (rank 0 shuts
# its engine down, which stops rank 1). Open MPI's mpirun exits 1 after passing a signal on,
# so its status is not checked; an error from either rank is.
# Usage: tensor_parallel_serve.sh WEFT MODEL MPIRUN [MPIRUN_FLAGS...]
# WEFT_SERVE_PARALLEL: the split of the two ranks (default --tensor-parallel 2; the pipeline
# test passes --pipeline-parallel 2).
set -uo pipefail
weft=${1:?usage: tensor_parallel_serve.sh WEFT MODEL MPIRUN [FLAGS...]}
model=${2:?}
shift 2
log=$(mktemp)
"$@" -np 2 "$weft" serve --model "$model" --device cpu --port 0 --threads 1 \
  ${WEFT_SERVE_PARALLEL:---tensor-parallel 2} >"$log" 2>&1 &
launcher=$!
trap 'kill -9 $launcher 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  grep -q 'on http://' "$log" && break
  kill -0 $launcher 2>/dev/null || { echo "mpirun weft serve exited early:"; cat "$log"; exit 1; }
  sleep 0.1
done
address=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -1)
[[ -n $address ]] || { echo "weft serve printed no address:"; cat "$log"; exit 1; }
body='{"prompt":"The whale","max_tokens":8,"temperature":0}'
served=$(curl -s "$address/v1/completions" -H 'content-type: application/json' -d "$body" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
alone=$("$weft" generate --model "$model" --prompt "The whale" --max-tokens 8 --device cpu --threads 1)
echo "served: [$served]"
echo "alone:  [$alone]"
kill -INT $launcher
for _ in $(seq 200); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
if kill -0 $launcher 2>/dev/null; then
  echo "mpirun weft serve did not stop within 20 s of SIGINT"; cat "$log"; exit 1
fi
cat "$log"
grep -q 'weft serve: shutting down' "$log" || { echo "FAIL: rank 0 did not shut down"; exit 1; }
if grep -q 'weft serve: rank\|MPI_ABORT' "$log"; then echo "FAIL: a rank failed"; exit 1; fi
[[ -n $served && $served == "$alone" ]] || { echo "FAIL: the served text differs"; exit 1; }
echo "tensor-parallel serve ok"
