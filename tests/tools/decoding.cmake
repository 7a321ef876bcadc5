# Beam search and Inferflow's FSD from the command line (docs/sampling.md) on weft-tiny: beam
# search runs through the engine and prints its n best beams; FSD is deterministic; bad mixes
# are named. Then over HTTP and WebSocket against `weft serve` (gateway/decoding_*).
set(tiny ${CMAKE_SOURCE_DIR}/models/weft-tiny)
add_test(NAME weft_generate_beam_search
         COMMAND weft generate --model ${tiny} --beam-width 4 --n-best 2 --prompt-ids 5,6,7 --max-tokens 5 --ignore-eos --format json --threads 1)
set_tests_properties(weft_generate_beam_search PROPERTIES PASS_REGULAR_EXPRESSION
  "^\\{\"index\":0,\"text\":\"[^\n]*\",\"token_ids\":\\[[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+\\],\"logprob\":[^,]+,\"score\":[^,]+,\"finish_reason\":\"length\"\\}\n\\{\"index\":1,[^\n]*\n\\{\"beams\":2,\"prompt_tokens\":3\\}\n$")
set(fsd_generate "$<TARGET_FILE:weft> generate --model ${tiny} --prompt-ids 5,6,7 --max-tokens 10 --ignore-eos --threads 1 --fsd")
add_test(NAME weft_generate_fsd_is_deterministic
         COMMAND sh -c "a=$(${fsd_generate} fsd --fsd-alpha 0.7) && b=$(${fsd_generate} fsd --fsd-alpha 0.7 --seed 9) && echo \"$a|$b\" && [ \"$a\" = \"$b\" ] && [ -n \"$a\" ]")
add_test(NAME weft_generate_random_fsd_is_seeded
         COMMAND sh -c "a=$(${fsd_generate} random_fsd --temperature 1 --top-k 8 --seed 4) && b=$(${fsd_generate} random_fsd --temperature 1 --top-k 8 --seed 4) && echo \"$a|$b\" && [ \"$a\" = \"$b\" ] && [ -n \"$a\" ]")
add_test(NAME weft_generate_fsd_with_top_p
         COMMAND weft generate --model ${tiny} --prompt-ids 5 --fsd fsd --top-p 0.9)
set_tests_properties(weft_generate_fsd_with_top_p PROPERTIES PASS_REGULAR_EXPRESSION
  "fsd: cannot be combined with top_p")
add_test(NAME weft_generate_beam_n_best_too_large
         COMMAND weft generate --model ${tiny} --prompt-ids 5 --beam-width 2 --n-best 3)
set_tests_properties(weft_generate_beam_n_best_too_large PROPERTIES PASS_REGULAR_EXPRESSION
  "n: 3 is more than beam_width 2")

add_test(NAME weft_serve_decoding_curl COMMAND ${gateway_run} bash ${gateway_tests}/decoding_curl.sh)
add_test(NAME weft_serve_decoding_websocket
         COMMAND ${gateway_run} node ${gateway_tests}/decoding_websocket.js)
set_tests_properties(weft_serve_decoding_curl PROPERTIES TIMEOUT 180
  PASS_REGULAR_EXPRESSION "\n0 failure\\(s\\)\n")
set_tests_properties(weft_serve_decoding_websocket PROPERTIES FIXTURES_REQUIRED gateway_node
  TIMEOUT 180 ENVIRONMENT WEFT_TEST_NODE=${gateway_node}
  PASS_REGULAR_EXPRESSION "all decoding websocket checks passed")
set_tests_properties(weft_serve_decoding_curl weft_serve_decoding_websocket
  PROPERTIES FAIL_REGULAR_EXPRESSION "FAIL|weft serve exited with|did not stop|ThreadSanitizer|AddressSanitizer|runtime error")
