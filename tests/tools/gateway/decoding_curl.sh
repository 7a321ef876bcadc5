#!/usr/bin/env bash
# Beam search and Inferflow's FSD over the HTTP API (docs/http-api.md, docs/sampling.md)
# against a running `weft serve` at $WEFT_URL (run_with_server.sh).
set -uo pipefail
url=${WEFT_URL:?}
failures=0
expect() {  # NAME PATTERN TEXT: TEXT must match the extended regex PATTERN
  if grep -Eq -- "$2" <<<"$3"; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected /$2/ in:"; echo "$3" | head -c 2000; echo
    failures=$((failures + 1))
  fi
}
post() {
  curl -s -X POST "$url$1" -H 'Content-Type: application/json' --data-binary "$2"
}

out=$(post /v1/completions '{"prompt":"The whale","max_tokens":5,"beam_width":3,"n":2,"ignore_eos":true}')
expect beam_two_choices '"choices":\[\{"index":0,"text":"[^"]*","logprobs":null,"finish_reason":"length"\},\{"index":1,"text":"[^"]*","logprobs":null,"finish_reason":"length"\}\].*"completion_tokens":10' "$out"
again=$(post /v1/completions '{"prompt":"The whale","max_tokens":5,"beam_width":3,"n":2,"ignore_eos":true}')
expect beam_is_deterministic "$(grep -o '"choices":\[[^]]*\]' <<<"$out" | sed 's/[][\\.*^$]/\\&/g')" "$again"
out=$(post /v1/completions '{"prompt":"The whale","max_tokens":4,"use_beam_search":true,"best_of":2,"length_penalty":0.5,"ignore_eos":true}')
expect beam_vllm_spelling '"choices":\[\{"index":0,"text":"[^"]*","logprobs":null,"finish_reason":"length"\}\]' "$out"
out=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"beam_width":2,"stream":true,"ignore_eos":true}')
expect beam_streams '"delta":\{.*"finish_reason":"length".*\[DONE\]' "$(tr '\n' ' ' <<<"$out")"
out=$(post /v1/completions '{"prompt":"The whale","beam_width":2,"n":3}')
expect beam_n_too_large '"message":"n: 3 is more than beam_width 2.*"param":"n"' "$out"
out=$(post /v1/completions '{"prompt":"The whale","beam_width":2,"top_p":0.5}')
expect beam_with_top_p '"message":"beam_width: cannot be combined with top_k/top_p' "$out"
out=$(post /v1/completions '{"prompt":"The whale","best_of":2}')
expect best_of_alone '"param":"best_of"' "$out"

out=$(post /v1/completions '{"prompt":"The whale","max_tokens":6,"fsd":"fsd","fsd_k":4,"fsd_alpha":0.6,"fsd_n":2,"fsd_beta":0.8,"fsd_pool_size":20,"ignore_eos":true}')
expect fsd '"finish_reason":"length".*"completion_tokens":6' "$out"
out=$(post /v1/completions '{"prompt":"The whale","max_tokens":6,"fsd":"random_fsd","fsd_random_steps":3,"fsd_random_prob":0.5,"top_k":8,"top_p":0.93,"seed":5,"ignore_eos":true}')
expect random_fsd '"finish_reason":"length".*"completion_tokens":6' "$out"
out=$(post /v1/completions '{"prompt":"The whale","fsd":"greedy"}')
expect fsd_bad_name '"message":"fsd: \\"greedy\\" is not one of off, fsd, random_fsd' "$out"
out=$(post /v1/completions '{"prompt":"The whale","fsd":"fsd","fsd_alpha":2}')
expect fsd_bad_alpha '"message":"fsd_alpha: 2 is outside \[0, 1\]' "$out"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
