# Per-request speculation over HTTP and WebSocket against `weft serve --speculate prompt-lookup`
# (docs/speculative.md#per-request).
add_test(NAME weft_serve_speculation_curl
         COMMAND ${gateway_run} bash ${gateway_tests}/speculation_curl.sh)
add_test(NAME weft_serve_speculation_websocket
         COMMAND ${gateway_run} node ${gateway_tests}/speculation_websocket.js)
set_tests_properties(weft_serve_speculation_curl PROPERTIES TIMEOUT 180
  ENVIRONMENT "WEFT_SERVE_ARGS=--speculate prompt-lookup"
  PASS_REGULAR_EXPRESSION "\n0 failure\\(s\\)\n")
set_tests_properties(weft_serve_speculation_websocket PROPERTIES FIXTURES_REQUIRED gateway_node
  TIMEOUT 180 ENVIRONMENT "WEFT_TEST_NODE=${gateway_node};WEFT_SERVE_ARGS=--speculate prompt-lookup"
  PASS_REGULAR_EXPRESSION "all speculation websocket checks passed")
set_tests_properties(weft_serve_speculation_curl weft_serve_speculation_websocket
  PROPERTIES FAIL_REGULAR_EXPRESSION "FAIL|weft serve exited with|did not stop|ThreadSanitizer|AddressSanitizer|runtime error")
