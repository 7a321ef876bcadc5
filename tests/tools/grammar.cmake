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
