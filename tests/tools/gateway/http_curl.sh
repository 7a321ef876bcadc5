#!/usr/bin/env bash
# The HTTP API through curl against a running `weft serve` at $WEFT_URL (run_with_server.sh):
# each endpoint, SSE with curl -N, the OpenAI error JSON for bad input, keep-alive, and a
# client that leaves mid-stream having its request cancelled.
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
post() {  # PATH BODY [curl options]: status line and body
  local path=$1 body=$2; shift 2
  curl -s -i -X POST "$url$path" -H 'Content-Type: application/json' --data-binary "$body" "$@"
}

expect health '^\{"status":"ok"\}$' "$(curl -s "$url/health")"
expect models '"data":\[\{"id":"weft-tiny","object":"model".*"max_model_len":1024' \
  "$(curl -s "$url/v1/models")"

out=$(post /v1/completions '{"model":"weft-tiny","prompt":"The whale","max_tokens":4,"temperature":0}')
expect completion '^HTTP/1.1 200.*"object":"text_completion".*"choices":\[\{"index":0,"text":"[^"]+","logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":[0-9]+,"completion_tokens":4,' "$(tr -d '\r' <<<"$out" | tr '\n' ' ')"
greedy=$(grep -o '"text":"[^"]*"' <<<"$out")
out2=$(post /v1/completions '{"prompt":"The whale","max_tokens":4,"temperature":0}')
expect completion_greedy_repeats "$greedy" "$out2"

out=$(post /v1/completions '{"prompt":"The whale","max_tokens":3,"n":2,"seed":7,"logprobs":1}')
expect completion_n2_logprobs '"index":0,"text".*"token_logprobs":\[[^]]+\].*"index":1,"text".*"completion_tokens":6,' "$out"

out=$(post /v1/chat/completions '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"max_completion_tokens":3,"top_k":5,"min_p":0.05,"repetition_penalty":1.1,"ignore_eos":true,"stop":["zzz"],"stop_token_ids":[0],"logit_bias":{"5":-100},"presence_penalty":0.5,"frequency_penalty":0.5,"top_p":0.9}')
expect chat '"object":"chat.completion".*"message":\{"role":"assistant","content":"[^"]*"\},"logprobs":null,"finish_reason":"length".*"completion_tokens":3' "$out"

out=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":2,"logprobs":true,"top_logprobs":2}')
expect chat_logprobs '"logprobs":\{"content":\[\{"token":"[^"]*","logprob":[-0-9.eE]+,"bytes":\[[0-9,]*\],"top_logprobs":\[\{"token"' "$out"

# Server-sent events, unbuffered, as OpenAI streams them.
out=$(curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The whale","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}')
expect sse_chunks '^data: \{"id":"cmpl-[0-9]+","object":"text_completion","created":[0-9]+,"model":"weft-tiny","choices":\[\{"index":0,"text":' "$out"
expect sse_finish '"choices":\[\{"index":0,"text":"","logprobs":null,"finish_reason":"length"\}\],"usage":null\}' "$out"
expect sse_usage '"choices":\[\],"usage":\{"prompt_tokens":[0-9]+,"completion_tokens":3,"total_tokens":[0-9]+,"prompt_tokens_details":\{"cached_tokens":[0-9]+\}\}\}' "$out"
expect sse_done 'data: \[DONE\]$' "$out"
# Every event is one `data:` line and a blank line (a file keeps the trailing newlines).
sse=$(mktemp)
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The whale","max_tokens":3,"stream":true}' >"$sse"
if [[ $(grep -c '^data: ' "$sse") -ge 4 && $(grep -c '^data: ' "$sse") -eq $(grep -c '^$' "$sse") ]]; then
  echo "ok   sse_events_end_in_blank_lines"
else
  echo "FAIL sse_events_end_in_blank_lines:"; cat -A "$sse"; failures=$((failures + 1))
fi
rm -f "$sse"
out=$(curl -sN "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"stream":true}')
expect sse_chat_role '"object":"chat.completion.chunk".*"delta":\{"role":"assistant","content":""\}' "$out"
expect sse_chat_finish '"delta":\{\},"logprobs":null,"finish_reason":"length"\}\]\}' "$out"
if [[ $out != *'"usage"'* ]]; then echo "ok   sse_no_usage_unless_asked"; else echo "FAIL sse_no_usage_unless_asked"; failures=$((failures + 1)); fi

# Errors: OpenAI's error JSON, the status, and the parameter named.
expect bad_top_p '^HTTP/1.1 400.*"message":"top_p: 1.5 is outside \(0, 1\]","type":"invalid_request_error","param":"top_p"' \
  "$(post /v1/completions '{"prompt":"x","top_p":1.5}' | tr -d '\r' | tr '\n' ' ')"
expect bad_temperature_type '^HTTP/1.1 400.*"param":"temperature"' \
  "$(post /v1/completions '{"prompt":"x","temperature":"hot"}' | tr -d '\r' | tr '\n' ' ')"
expect bad_max_tokens '^HTTP/1.1 400.*max_tokens: 0 is outside.*"param":"max_tokens"' \
  "$(post /v1/completions '{"prompt":"x","max_tokens":0}' | tr -d '\r' | tr '\n' ' ')"
expect bad_n '^HTTP/1.1 400.*"param":"n"' "$(post /v1/completions '{"prompt":"x","n":1000}' | tr -d '\r' | tr '\n' ' ')"
expect bad_stop_item '^HTTP/1.1 400.*"param":"stop\[1\]"' \
  "$(post /v1/completions '{"prompt":"x","stop":["a",3]}' | tr -d '\r' | tr '\n' ' ')"
expect bad_logit_bias_key '^HTTP/1.1 400.*"param":"logit_bias\[\\"abc\\"\]"' \
  "$(post /v1/completions '{"prompt":"x","logit_bias":{"abc":1}}' | tr -d '\r' | tr '\n' ' ')"
expect bad_message_role '^HTTP/1.1 400.*"param":"messages\[0\].role"' \
  "$(post /v1/chat/completions '{"messages":[{"role":"robot","content":"x"}]}' | tr -d '\r' | tr '\n' ' ')"
expect unknown_param '^HTTP/1.1 400.*"message":"functions: unknown or unsupported parameter"' \
  "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"functions":[]}' | tr -d '\r' | tr '\n' ' ')"
expect empty_tools '^HTTP/1.1 400.*"param":"tools"' \
  "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[]}' | tr -d '\r' | tr '\n' ' ')"
expect missing_prompt '^HTTP/1.1 400.*"param":"prompt"' "$(post /v1/completions '{"max_tokens":2}' | tr -d '\r' | tr '\n' ' ')"
expect stream_options_without_stream '^HTTP/1.1 400.*"param":"stream_options"' \
  "$(post /v1/completions '{"prompt":"x","stream_options":{"include_usage":true}}' | tr -d '\r' | tr '\n' ' ')"
expect wrong_model '^HTTP/1.1 404.*"param":"model","code":"model_not_found"' \
  "$(post /v1/completions '{"prompt":"x","model":"gpt-4"}' | tr -d '\r' | tr '\n' ' ')"
expect not_json '^HTTP/1.1 400.*not valid JSON' "$(post /v1/completions '{"prompt":' | tr -d '\r' | tr '\n' ' ')"
expect not_object '^HTTP/1.1 400.*not a JSON object' "$(post /v1/completions '[1,2]' | tr -d '\r' | tr '\n' ' ')"
expect no_route '^HTTP/1.1 404.*"code":"not_found"' "$(curl -s -i "$url/v2/nothing" | tr -d '\r' | tr '\n' ' ')"
expect wrong_method '^HTTP/1.1 405.*Allow: POST.*"code":"method_not_allowed"' \
  "$(curl -s -i "$url/v1/completions" | tr -d '\r' | tr '\n' ' ')"
expect wrong_content_type '^HTTP/1.1 415' \
  "$(curl -s -i -X POST "$url/v1/completions" -H 'Content-Type: text/plain' -d '{"prompt":"x"}' | tr -d '\r' | tr '\n' ' ')"
big=$(mktemp); head -c 1100000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt":"/; s/$/"}/' >"$big"
expect body_too_large '^HTTP/1.1 413.*"code":"body_too_large"' \
  "$(curl -s -i -X POST "$url/v1/completions" -H 'Content-Type: application/json' --data-binary @"$big" | tr -d '\r' | tr '\n' ' ')"
rm -f "$big"

# Raw sockets for what curl will not send: a malformed request line, a truncated body.
hostport=${url#http://}
raw() { python3 -c '
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode())
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
print(data.decode(errors="replace"))' "$hostport" "$1"; }
expect malformed_http '^HTTP/1.1 400.*malformed HTTP request' "$(raw 'NOT HTTP AT ALL\r\n\r\n' | tr -d '\r' | tr '\n' ' ')"
expect truncated_body '^HTTP/1.1 400.*malformed HTTP request: partial message' \
  "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"prompt":' | tr -d '\r' | tr '\n' ' ')"

# Keep-alive: two requests on one connection.
out=$(curl -sv "$url/health" "$url/v1/models" 2>&1)
expect keep_alive 'Re-using existing connection|Reusing existing' "$out"

# A client that leaves mid-stream: its request is cancelled, and the server serves on.
before=$(curl -s "$url/metrics" | grep -o 'finish_reason="cancelled"} [0-9]*' | grep -o '[0-9]*$')
curl -sN --max-time 1 "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"The whale","max_tokens":1000,"ignore_eos":true,"stream":true}' >/dev/null
cancelled=$before
for _ in $(seq 50); do
  cancelled=$(curl -s "$url/metrics" | grep -o 'finish_reason="cancelled"} [0-9]*' | grep -o '[0-9]*$')
  [[ $cancelled -gt $before ]] && break
  sleep 0.1
done
if [[ $cancelled -gt $before ]]; then echo "ok   disconnect_cancels"; else echo "FAIL disconnect_cancels: cancelled count stayed $cancelled"; failures=$((failures + 1)); fi
expect metrics_after '# HELP weft_requests_running.*weft_kv_pages_used 0 .*weft_requests_finished_total\{finish_reason="length"\} [1-9]' \
  "$(curl -s "$url/metrics" | tr '\n' ' ')"
expect metrics_kv_pool 'weft_kv_pool_tokens [1-9][0-9.e+]* .*weft_kv_page_bytes [1-9][0-9.e+]* ' \
  "$(curl -s "$url/metrics" | tr '\n' ' ')"
expect metrics_latency_histograms 'weft_time_to_first_token_seconds_bucket\{le="0.001"\} [0-9]+ .*weft_time_to_first_token_seconds_count [1-9][0-9]* .*weft_inter_token_latency_seconds_bucket\{le="\+Inf"\} [1-9][0-9]* ' \
  "$(curl -s "$url/metrics" | tr '\n' ' ')"
post /v1/completions '{"prompt":"Code:","max_tokens":12,"response_format":{"type":"regex","regex":"[A-Z]{3}-[0-9]{4}"}}' >/dev/null
expect metrics_constraint 'weft_constraint_masks_total [1-9][0-9]* .*weft_constraint_mask_wait_seconds_total [0-9.e+-]+ ' \
  "$(curl -s "$url/metrics" | tr '\n' ' ')"
expect still_serving '"finish_reason":"length"' "$(post /v1/completions '{"prompt":"x","max_tokens":1}')"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
