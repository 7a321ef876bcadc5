# weft chat-template on the npm packages' tokenizer_config.json (fetched into the build folder
# by scripts/fetch-test-data) and the committed conversations (tests/fixtures/chat_templates).
set(chat_fixtures ${CMAKE_SOURCE_DIR}/tests/fixtures/chat_templates)
set(chat_npm ${CMAKE_BINARY_DIR}/test-data/tokenizers)

# Qwen3 with enable_thinking false: transformers renders exactly this (expected.json,
# qwen3/thinking_disabled); nothing may follow the empty think block.
add_test(NAME weft_chat_template_qwen3
         COMMAND weft chat-template --model ${chat_npm}/qwen3
                 --messages ${chat_fixtures}/cli_thinking_off.json --add-generation-prompt)
set_tests_properties(weft_chat_template_qwen3 PROPERTIES PASS_REGULAR_EXPRESSION
  "^<\\|im_start\\|>user\nHello! How are you\\?<\\|im_end\\|>\n<\\|im_start\\|>assistant\n<think>\n\n</think>\n\n$")

# Gemma-3 folds nothing here and rejects two user turns in a row, as transformers does.
add_test(NAME weft_chat_template_alternation_error
         COMMAND weft chat-template --model ${chat_npm}/gemma3/tokenizer_config.json
                 --messages ${chat_fixtures}/cli_two_user_turns.json)
set_tests_properties(weft_chat_template_alternation_error PROPERTIES PASS_REGULAR_EXPRESSION
  "weft chat-template: .*gemma3/tokenizer_config.json \\(chat_template \"default\"\\):[0-9]+:[0-9]+: raise_exception: Conversation roles must alternate user/assistant/user/assistant/\\.\\.\\.")
add_test(NAME weft_chat_template_alternation_exit_code
         COMMAND weft chat-template --model ${chat_npm}/gemma3
                 --messages ${chat_fixtures}/cli_two_user_turns.json)
set_tests_properties(weft_chat_template_alternation_exit_code PROPERTIES WILL_FAIL TRUE)

# The Llama-2 package ships no chat template: a clear error naming the file.
add_test(NAME weft_chat_template_missing
         COMMAND weft chat-template --model ${chat_npm}/llama2
                 --messages ${chat_fixtures}/cli_two_user_turns.json)
set_tests_properties(weft_chat_template_missing PROPERTIES PASS_REGULAR_EXPRESSION
  "weft chat-template: .*llama2/tokenizer_config.json: has no \"chat_template\"")

# A --model that does not exist is named as given, not as the folder above it.
add_test(NAME weft_chat_template_no_such_model
         COMMAND weft chat-template --model /nonexistent/model
                 --messages ${chat_fixtures}/cli_two_user_turns.json)
set_tests_properties(weft_chat_template_no_such_model PROPERTIES PASS_REGULAR_EXPRESSION
  "^weft chat-template: /nonexistent/model: no such folder or file \\(expected a model folder holding tokenizer_config.json or chat_template.jinja, or a tokenizer_config.json\\)\n$")
