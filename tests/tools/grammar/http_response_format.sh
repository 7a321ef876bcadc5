#!/usr/bin/env bash
# response_format through the HTTP API with curl, against `weft serve` at $WEFT_URL
# (tests/tools/gateway/run_with_server.sh): each format completes with `stop` and matches,
# streaming too, and bad formats are a 400 naming response_format before anything runs.
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
post() {  # PATH BODY: status line and body, on one line
  curl -s -i -X POST "$url$1" -H 'Content-Type: application/json' --data-binary "$2" | tr -d '\r' | tr '\n' ' '
}
schema='{"type":"object","properties":{"city":{"enum":["Paris","Oslo"]},"days":{"type":"integer","minimum":1,"maximum":9}},"required":["city","days"]}'

expect json_schema '^HTTP/1.1 200.*"text":"\{\\"city\\":\\"(Paris|Oslo)\\",\\"days\\":[1-9]\}","logprobs":null,"finish_reason":"stop"' \
  "$(post /v1/completions '{"prompt":"Trip:","max_tokens":40,"temperature":1,"seed":3,"response_format":{"type":"json_schema","json_schema":{"name":"trip","strict":true,"schema":'"$schema"'}}}')"
expect chat_json_schema '"message":\{"role":"assistant","content":"\{\\"city\\":\\"(Paris|Oslo)\\",\\"days\\":[1-9]\}"\},"logprobs":null,"finish_reason":"stop"' \
  "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Plan a trip"}],"max_tokens":40,"response_format":{"type":"json_schema","json_schema":{"schema":'"$schema"'}}}')"
expect n_samples_all_valid '^HTTP/1.1 200.*"index":3' \
  "$(post /v1/completions '{"prompt":"Trip:","max_tokens":40,"temperature":1,"n":4,"seed":5,"response_format":{"type":"json_schema","json_schema":{"schema":'"$schema"'}}}')"
expect regex '"text":"(yes|no)","logprobs":null,"finish_reason":"stop"' \
  "$(post /v1/completions '{"prompt":"x","max_tokens":10,"response_format":{"type":"regex","regex":"(yes|no)"}}')"
expect grammar '"text":"\[[1-9](,[1-9])*\]","logprobs":null,"finish_reason":"stop"' \
  "$(post /v1/completions '{"prompt":"x","max_tokens":40,"temperature":1,"seed":1,"response_format":{"type":"grammar","grammar":"root ::= \"[\" [1-9] (\",\" [1-9]){0,3} \"]\""}}')"
expect json_object '"text":"\{.*"finish_reason":"(stop|length)"' \
  "$(post /v1/completions '{"prompt":"x","max_tokens":30,"response_format":{"type":"json_object"}}')"
sse=$(curl -s -N -X POST "$url/v1/completions" -H 'Content-Type: application/json' --data-binary \
  '{"prompt":"x","max_tokens":10,"stream":true,"response_format":{"type":"regex","regex":"(yes|no)"}}')
expect sse_regex '"finish_reason":"stop"' "$sse"
expect sse_done 'data: \[DONE\]' "$sse"

# Errors: 400 before generation, naming response_format and where.
expect unsupported_keyword '^HTTP/1.1 400.*"message":"response_format: JSON Schema at .#/properties/a.: unsupported keyword .multipleOf.","type":"invalid_request_error","param":"response_format"' \
  "$(post /v1/completions '{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}}}}}')"
expect one_of_overlap '^HTTP/1.1 400.*branches 0 and 1 may both match one value.*"param":"response_format"' \
  "$(post /v1/completions '{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"oneOf":[{"type":"integer"},{"type":"number"}]}}}}')"
expect grammar_line_column '^HTTP/1.1 400.*"message":"response_format: grammar line 1, column [0-9]+: ' \
  "$(post /v1/completions '{"prompt":"x","response_format":{"type":"grammar","grammar":"root ::= (\"a\""}}')"
expect regex_offset '^HTTP/1.1 400.*"message":"response_format: regex at offset 1: ' \
  "$(post /v1/completions '{"prompt":"x","response_format":{"type":"regex","regex":"a(b"}}')"
expect bad_type '^HTTP/1.1 400.*"param":"response_format.type"' \
  "$(post /v1/completions '{"prompt":"x","response_format":{"type":"xml"}}')"
expect missing_schema '^HTTP/1.1 400.*"param":"response_format.json_schema.schema"' \
  "$(post /v1/completions '{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"x"}}}')"
expect text_is_unconstrained '^HTTP/1.1 200.*"finish_reason":"length"' \
  "$(post /v1/completions '{"prompt":"x","max_tokens":3,"response_format":{"type":"text"}}')"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
