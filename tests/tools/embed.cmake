# weft embed and POST /v1/embeddings on the committed random-weight BERT
# (tests/fixtures/bert/random_tiny, made by tests/fixtures/bert/make_random_bert.py).
set(bert_tiny ${CMAKE_SOURCE_DIR}/tests/fixtures/bert/random_tiny)

add_test(NAME weft_embed_texts COMMAND sh -c "\"$<TARGET_FILE:weft>\" embed --model ${bert_tiny} 'hello world' x 2>&1; echo exit=$?")
set_tests_properties(weft_embed_texts PROPERTIES PASS_REGULAR_EXPRESSION
  "^\\{\"index\":0,\"tokens\":4,\"embedding\":\\[-?[0-9][^]]*\\]\\}\n\\{\"index\":1,\"tokens\":3,\"embedding\":\\[[^]]+\\]\\}\nexit=0\n$")
# Text and its token ids ([CLS] hello world [SEP]) give the same vector; a bad line stops with
# its number.
add_test(NAME weft_embed_jsonl COMMAND sh -c "printf '%s\\n' '\"hello world\"' '[2,100,101,3]' | \"$<TARGET_FILE:weft>\" embed --model ${bert_tiny} --jsonl --pooling cls --normalize > embed_jsonl.out 2>&1; echo exit=$?; sed -n 's/^{\"index\":[01],//p' embed_jsonl.out | uniq | wc -l")
set_tests_properties(weft_embed_jsonl PROPERTIES PASS_REGULAR_EXPRESSION "^exit=0\n1\n$")
add_test(NAME weft_embed_bad_line COMMAND sh -c "printf '%s\\n' '\"ok\"' '{\"text\": 1}' | \"$<TARGET_FILE:weft>\" embed --model ${bert_tiny} --jsonl 2>&1; echo exit=$?")
set_tests_properties(weft_embed_bad_line PROPERTIES PASS_REGULAR_EXPRESSION
  "weft embed: line 2: expected a JSON string or an array of token ids, got \\{\"text\":1\\}\nexit=1\n$")
add_test(NAME weft_embed_too_long COMMAND sh -c "\"$<TARGET_FILE:weft>\" embed --model ${bert_tiny} ok \"$(printf 'fox %.0s' $(seq 50))\" 2>&1; echo exit=$?")
set_tests_properties(weft_embed_too_long PROPERTIES PASS_REGULAR_EXPRESSION
  "\\{\"index\":0,[^\n]+\nweft embed: input 2: 52 tokens exceed the model's 40 positions\nexit=1\n$")
add_test(NAME weft_embed_decoder_model COMMAND sh -c "\"$<TARGET_FILE:weft>\" embed --model ${CMAKE_SOURCE_DIR}/models/weft-tiny hi 2>&1; echo exit=$?")
set_tests_properties(weft_embed_decoder_model PROPERTIES PASS_REGULAR_EXPRESSION
  "weft embed: .*weft-tiny holds a decoder-only model; weft embed needs an encoder-only one.*\nexit=1\n$")
add_test(NAME weft_generate_refuses_encoder COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${bert_tiny} --prompt hi 2>&1; echo exit=$?")
set_tests_properties(weft_generate_refuses_encoder PROPERTIES PASS_REGULAR_EXPRESSION
  "BertModel is an encoder-only model: it embeds text.*use `weft embed`.*\nexit=1\n$")

# The official `openai` npm package's embeddings.create against weft serve on the same model.
add_test(NAME weft_serve_embeddings_openai
         COMMAND bash ${gateway_tests}/run_with_server.sh $<TARGET_FILE:weft> ${bert_tiny}
                 node ${gateway_tests}/embeddings_client.js)
set_tests_properties(weft_serve_embeddings_openai PROPERTIES
  FIXTURES_REQUIRED gateway_node TIMEOUT 180
  ENVIRONMENT "WEFT_TEST_NODE=${gateway_node};WEFT_BIN=$<TARGET_FILE:weft>;WEFT_BERT=${bert_tiny}"
  PASS_REGULAR_EXPRESSION "all embeddings checks passed"
  FAIL_REGULAR_EXPRESSION "FAIL|weft serve exited with|did not stop|ThreadSanitizer|AddressSanitizer|runtime error")

# The numbers: weft embed against BERT's forward pass written out in plain Python (double
# precision), on random_tiny. transformers itself is compared by encoder_reference_test.
add_test(NAME weft_embed_reference_forward
         COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/fixtures/bert/reference_forward.py $<TARGET_FILE:weft> ${bert_tiny})
set_tests_properties(weft_embed_reference_forward PROPERTIES TIMEOUT 120
  PASS_REGULAR_EXPRESSION "reference forward ok" FAIL_REGULAR_EXPRESSION "FAIL|Traceback")

# Embeddings over the WebSocket protocol, with the `ws` package.
add_test(NAME weft_serve_embeddings_websocket
         COMMAND bash ${gateway_tests}/run_with_server.sh $<TARGET_FILE:weft> ${bert_tiny}
                 node ${gateway_tests}/embeddings_websocket.js)
set_tests_properties(weft_serve_embeddings_websocket PROPERTIES
  FIXTURES_REQUIRED gateway_node TIMEOUT 180
  ENVIRONMENT "WEFT_TEST_NODE=${gateway_node}"
  PASS_REGULAR_EXPRESSION "all websocket embeddings checks passed"
  FAIL_REGULAR_EXPRESSION "FAIL|weft serve exited with|did not stop|ThreadSanitizer|AddressSanitizer|runtime error")

# --truncate cuts an over-long input to the model's 40 positions instead of failing on it.
add_test(NAME weft_embed_truncate COMMAND sh -c "\"$<TARGET_FILE:weft>\" embed --model ${bert_tiny} --truncate \"$(printf 'fox %.0s' $(seq 50))\" 2>&1; echo exit=$?")
set_tests_properties(weft_embed_truncate PROPERTIES PASS_REGULAR_EXPRESSION
  "^\\{\"index\":0,\"tokens\":40,\"embedding\":\\[[^]]+\\]\\}\nexit=0\n$")
