# weft-tiny, the bundled default model: commands use it when --model is omitted
# (tools/weft/default_model.cpp); weft perplexity's command line and its errors.
add_test(NAME weft_generate_default_model
         COMMAND weft generate --prompt "Call me Ishmael." --max-tokens 6 --format json)
set_tests_properties(weft_generate_default_model PROPERTIES
  ENVIRONMENT "WEFT_MODEL="
  PASS_REGULAR_EXPRESSION "\"finish_reason\":\"length\",\"prompt_tokens\":7,\"completion_tokens\":6,")
add_test(NAME weft_generate_model_from_env
         COMMAND weft generate --prompt-ids 1 --max-tokens 1)
set_tests_properties(weft_generate_model_from_env PROPERTIES
  ENVIRONMENT "WEFT_MODEL=/nonexistent/env-model"
  PASS_REGULAR_EXPRESSION "/nonexistent/env-model: not a model folder")
add_test(NAME weft_perplexity_weft_tiny
         COMMAND weft perplexity --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-head.txt --window 256 --stride 128 --format json)
set_tests_properties(weft_perplexity_weft_tiny PROPERTIES
  PASS_REGULAR_EXPRESSION "\"tokens_scored\":3162,\"tokens\":3163,\"window\":256,\"stride\":128")
add_test(NAME weft_perplexity_missing_file
         COMMAND weft perplexity --file /nonexistent/text.txt)
set_tests_properties(weft_perplexity_missing_file PROPERTIES
  PASS_REGULAR_EXPRESSION "weft perplexity: /nonexistent/text.txt: cannot open: No such file")
add_test(NAME weft_perplexity_stride_beyond_window
         COMMAND weft perplexity --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-head.txt --window 64 --stride 128)
set_tests_properties(weft_perplexity_stride_beyond_window PROPERTIES
  PASS_REGULAR_EXPRESSION "stride 128 is larger than window 64")
add_test(NAME weft_perplexity_window_beyond_context
         COMMAND weft perplexity --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-head.txt --window 2048)
set_tests_properties(weft_perplexity_window_beyond_context PROPERTIES
  PASS_REGULAR_EXPRESSION "window 2048 exceeds the model's context of 1024 positions")
