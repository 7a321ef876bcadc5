# Constrained generation end to end (issue #8): grammar_corpus generates from every schema of
# tests/tools/grammar/schemas through the Engine at temperature 1.0 over many seeds, with the
# trained weft-tiny and with a random-weight fixture model, and validate.js checks every
# output that finished with `stop` with ajv (npm, installed into the build tree by
# setup_ajv.sh). The unsupported/ schemas must be refused at submit, naming the keyword.
set(grammar_tests ${CMAKE_CURRENT_SOURCE_DIR}/grammar)
set(grammar_node ${CMAKE_BINARY_DIR}/test-node-grammar)
add_executable(grammar_corpus ${grammar_tests}/grammar_corpus.cpp)
target_include_directories(grammar_corpus PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(grammar_corpus PRIVATE weft_actors Boost::json weft_warnings)
add_test(NAME grammar_ajv_setup COMMAND bash ${grammar_tests}/setup_ajv.sh ${grammar_node})
set_tests_properties(grammar_ajv_setup PROPERTIES FIXTURES_SETUP grammar_ajv TIMEOUT 300)
# One run per model: its name, the least fraction of samples that must stop (so the run
# validates something), and grammar_corpus's arguments.
function(weft_grammar_corpus name min_stop)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/grammar_corpus_${name}.jsonl)
  add_test(NAME grammar_corpus_${name}
           COMMAND sh -c "\"$@\" --schemas ${grammar_tests}/schemas --unsupported ${grammar_tests}/unsupported --out ${out} && node ${grammar_tests}/validate.js ${grammar_tests}/schemas ${out} ${min_stop}"
                   grammar_corpus $<TARGET_FILE:grammar_corpus> ${ARGN})
  set_tests_properties(grammar_corpus_${name} PROPERTIES FIXTURES_REQUIRED grammar_ajv TIMEOUT 300
    ENVIRONMENT WEFT_TEST_NODE=${grammar_node} FAIL_REGULAR_EXPRESSION "FAIL")
endfunction()
weft_grammar_corpus(weft_tiny 0.5 --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --samples 4 --max-tokens 128)
weft_grammar_corpus(random_fixture 0.3
  --model ${CMAKE_SOURCE_DIR}/tests/fixtures/models/llama_mqa_tied_llama3_bf16 --samples 16 --max-tokens 200
  --byte-tokenizer ${CMAKE_CURRENT_BINARY_DIR}/grammar-models)

# weft generate with a constraint, on weft-tiny at temperature 1 with fixed seeds.
set(grammar_generate $<TARGET_FILE:weft> generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --prompt "Order:")
add_test(NAME weft_generate_json_schema
         COMMAND ${grammar_generate} --json-schema ${grammar_tests}/schemas/61_tool_call.json
                 --temperature 1 --seed 1 --max-tokens 80)
set_tests_properties(weft_generate_json_schema PROPERTIES PASS_REGULAR_EXPRESSION
  "^\\{\"name\":\"get_(weather|time)\",\"arguments\":\\{\"city\":\"[^\"]*\",\"unit\":\"[cf]\"\\}\\}\n$")
add_test(NAME weft_generate_json_schema_stops
         COMMAND ${grammar_generate} --json-schema ${grammar_tests}/schemas/61_tool_call.json
                 --temperature 1 --seed 1 --max-tokens 80 --format json)
set_tests_properties(weft_generate_json_schema_stops PROPERTIES PASS_REGULAR_EXPRESSION
  "\n\\{\"finish_reason\":\"stop\"")
add_test(NAME weft_generate_regex COMMAND ${grammar_generate} --regex "(yes|no)" --max-tokens 10)
set_tests_properties(weft_generate_regex PROPERTIES PASS_REGULAR_EXPRESSION "^(yes|no)\n$")
add_test(NAME weft_generate_grammar
         COMMAND ${grammar_generate} --grammar ${grammar_tests}/numbers.gbnf --temperature 1 --seed 2 --max-tokens 40)
set_tests_properties(weft_generate_grammar PROPERTIES PASS_REGULAR_EXPRESSION "^\\[[1-9][0-9]?(,[1-9][0-9]?)*")
# Bad constraints fail before anything is generated, saying where.
add_test(NAME weft_generate_bad_grammar COMMAND ${grammar_generate} --grammar ${grammar_tests}/bad.gbnf)
set_tests_properties(weft_generate_bad_grammar PROPERTIES PASS_REGULAR_EXPRESSION
  "^weft generate: --grammar: grammar line 3, column 1: expected '\\)' to close the group opened at line 2, column 16\n$")
add_test(NAME weft_generate_unsupported_schema
         COMMAND ${grammar_generate} --json-schema ${grammar_tests}/unsupported/multiple_of.json)
set_tests_properties(weft_generate_unsupported_schema PROPERTIES PASS_REGULAR_EXPRESSION
  "^weft generate: --json-schema: JSON Schema at '#': unsupported keyword 'multipleOf'\n$")
add_test(NAME weft_generate_bad_regex COMMAND ${grammar_generate} --regex "a(?=b)")
set_tests_properties(weft_generate_bad_regex PROPERTIES PASS_REGULAR_EXPRESSION
  "^weft generate: --regex: regex at offset 1: lookaround")
add_test(NAME weft_generate_constraint_needs_tokenizer
         COMMAND $<TARGET_FILE:weft> generate --model ${CMAKE_SOURCE_DIR}/tests/fixtures/models/llama_gqa_f32 --prompt-ids 1 --json-object)
set_tests_properties(weft_generate_constraint_needs_tokenizer PROPERTIES PASS_REGULAR_EXPRESSION
  "--json-object needs the model's tokenizer.json")

# response_format through weft serve: HTTP with curl, WebSocket with the `ws` package the
# gateway tests install (their gateway_node fixture).
set(grammar_serve bash ${CMAKE_CURRENT_SOURCE_DIR}/gateway/run_with_server.sh $<TARGET_FILE:weft> ${CMAKE_SOURCE_DIR}/models/weft-tiny)
add_test(NAME weft_serve_response_format_http COMMAND ${grammar_serve} bash ${grammar_tests}/http_response_format.sh)
set_tests_properties(weft_serve_response_format_http PROPERTIES TIMEOUT 120
  PASS_REGULAR_EXPRESSION "\n0 failure\\(s\\)\n" FAIL_REGULAR_EXPRESSION "FAIL")
add_test(NAME weft_serve_response_format_websocket COMMAND ${grammar_serve} node ${grammar_tests}/websocket_response_format.js)
set_tests_properties(weft_serve_response_format_websocket PROPERTIES TIMEOUT 120
  FIXTURES_REQUIRED gateway_node ENVIRONMENT WEFT_TEST_NODE=${CMAKE_BINARY_DIR}/test-node
  PASS_REGULAR_EXPRESSION "websocket response_format checks passed" FAIL_REGULAR_EXPRESSION "FAIL")

# The JSON Schema Test Suite (draft 4 translated to 2020-12, plus suite-2020-12/ for the
# keywords draft 4 lacks), every instance fed byte by byte through the matcher: an invalid
# instance accepted fails the test (soundness), and so does any count below
# suite_baseline.json (coverage regression). The data comes from scripts/fetch-test-data.
add_executable(json_schema_suite ${grammar_tests}/json_schema_suite.cpp)
target_include_directories(json_schema_suite PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(json_schema_suite PRIVATE weft_grammar Boost::json weft_warnings)
set(suite_data ${CMAKE_BINARY_DIR}/test-data/json-schema-test-suite/tests/draft4)
add_test(NAME json_schema_test_suite
         COMMAND sh -c "if [ ! -d ${suite_data} ]; then echo 'SKIP: ${suite_data} is missing: run scripts/fetch-test-data ${CMAKE_BINARY_DIR}'; exit 0; fi; node ${grammar_tests}/suite_cases.js cases ${suite_data} ${grammar_tests}/suite-2020-12 ${CMAKE_CURRENT_BINARY_DIR}/suite_cases.json && $<TARGET_FILE:json_schema_suite> suite --cases ${CMAKE_CURRENT_BINARY_DIR}/suite_cases.json --out ${CMAKE_CURRENT_BINARY_DIR}/suite_results.jsonl && node ${grammar_tests}/suite_cases.js report ${CMAKE_CURRENT_BINARY_DIR}/suite_results.jsonl ${grammar_tests}/suite_baseline.json")
set_tests_properties(json_schema_test_suite PROPERTIES TIMEOUT 600 FAIL_REGULAR_EXPRESSION "FAIL" SKIP_REGULAR_EXPRESSION "SKIP:")

# Random walks through the matcher (json_schema_suite sample) over the real-world corpus
# (tests/fixtures/schemas/real-world, from npm packages by its collect.js) and over this
# folder's schemas: ajv must accept every output, and at least as many real-world schemas as
# the baseline must compile.
set(real_world ${CMAKE_SOURCE_DIR}/tests/fixtures/schemas/real-world)
foreach(corpus real_world:${real_world}:117 grammar_schemas:${grammar_tests}/schemas:75)
  string(REPLACE ":" ";" parts ${corpus})
  list(GET parts 0 name)
  list(GET parts 1 dir)
  list(GET parts 2 min_compiled)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/samples_${name}.jsonl)
  add_test(NAME json_schema_random_walks_${name}
           COMMAND sh -c "$<TARGET_FILE:json_schema_suite> sample --schemas ${dir} --out ${out} --samples 8 --seed 1 && node ${grammar_tests}/validate_samples.js ${dir} ${out} ${min_compiled}")
  set_tests_properties(json_schema_random_walks_${name} PROPERTIES FIXTURES_REQUIRED grammar_ajv
    TIMEOUT 300 ENVIRONMENT WEFT_TEST_NODE=${grammar_node} FAIL_REGULAR_EXPRESSION "FAIL")
endforeach()
