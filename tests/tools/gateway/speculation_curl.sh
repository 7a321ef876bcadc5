#!/usr/bin/env bash
# Per-request speculation over the HTTP API (docs/http-api.md, docs/speculative.md#per-request)
# against `weft serve --speculate prompt-lookup` at $WEFT_URL (run_with_server.sh with
# WEFT_SERVE_ARGS): "off" verifies no draft, the default and a capped request do, all three
# give the same greedy text; another method or a bad value is a 400 naming the field.
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
verifications() {
  curl -s "$url/metrics" | awk '/^weft_speculative_verifications_total/ {print $2}'
}
prompt='The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox'
body() {  # SPECULATION-FIELD (JSON or empty)
  echo "{\"prompt\":\"$prompt\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true${1:+,\"speculation\":$1}}"
}
text() { grep -o '"text":"[^"]*"' <<<"$1"; }

v0=$(verifications)
off=$(post /v1/completions "$(body '{"method":"off"}')")
v1=$(verifications)
expect off_completes '"finish_reason":"length"' "$off"
expect off_verifies_nothing "^$v0\$" "$v1"
default=$(post /v1/completions "$(body '')")
v2=$(verifications)
expect default_verifies "^yes\$" "$(awk -v a="$v1" -v b="$v2" 'BEGIN {print (b > a) ? "yes" : "no " a " " b}')"
expect default_same_text "^$(text "$off" | sed 's/[][\\.*^$()|+?{}]/\\&/g')\$" "$(text "$default")"
capped=$(post /v1/completions "$(body '{"method":"prompt-lookup","tokens":1}')")
expect capped_same_text "^$(text "$off" | sed 's/[][\\.*^$()|+?{}]/\\&/g')\$" "$(text "$capped")"
string=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"speculation":"off"}')
expect method_string '"finish_reason"' "$string"

out=$(post /v1/completions "$(body '{"method":"draft"}')")
expect other_method '"message":"speculation.method: \\"draft\\" needs an engine started with it \(this one speculates with prompt-lookup\)' "$out"
out=$(post /v1/completions "$(body '{"method":"medusa"}')")
expect bad_method '"message":"speculation.method: \\"medusa\\" is not one of off, prompt-lookup, draft".*"param":"speculation.method"' "$out"
out=$(post /v1/completions "$(body '{"tokens":0}')")
expect bad_tokens '"message":"speculation.tokens: 0 is outside \[1, 64\]' "$out"
out=$(post /v1/completions "$(body '{"depth":2}')")
expect unknown_field '"message":"speculation.depth: unknown field' "$out"
out=$(post /v1/completions "$(body '3')")
expect not_an_object '"message":"speculation: expected an object' "$out"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
