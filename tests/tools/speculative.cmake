# weft generate --speculate on weft-tiny (docs/speculative.md): the greedy continuation is the
# plain one (" of the ship's head is the whale's head. The whale's head is not a single; ...",
# what `weft generate` prints without --speculate), with the acceptance figures on stderr.
set(WEFT_SPEC_PROMPT "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox")
add_test(NAME weft_generate_speculate_prompt_lookup
         COMMAND weft generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu
                 --prompt "${WEFT_SPEC_PROMPT}" --max-tokens 24 --speculate prompt-lookup --spec-width 2)
set_tests_properties(weft_generate_speculate_prompt_lookup PROPERTIES PASS_REGULAR_EXPRESSION
  " of the ship's head is the whale's head\\. The whale's head is not a single.*mean acceptance length")
add_test(NAME weft_generate_speculate_draft
         COMMAND weft generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu
                 --prompt "${WEFT_SPEC_PROMPT}" --max-tokens 24 --speculate draft
                 --draft-model ${CMAKE_SOURCE_DIR}/models/weft-tiny --spec-tokens 3)
set_tests_properties(weft_generate_speculate_draft PROPERTIES PASS_REGULAR_EXPRESSION
  " of the ship's head is the whale's head\\. The whale's head is not a single.*mean acceptance length")
add_test(NAME weft_generate_speculate_missing_draft
         COMMAND weft generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu
                 --prompt "x" --speculate draft --draft-model /nonexistent/draft)
set_tests_properties(weft_generate_speculate_missing_draft PROPERTIES PASS_REGULAR_EXPRESSION
  "weft generate: draft_model_dir: .*nonexistent")
add_test(NAME weft_generate_speculate_unknown
         COMMAND weft generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --prompt "x" --speculate medusa)
set_tests_properties(weft_generate_speculate_unknown PROPERTIES WILL_FAIL TRUE)
