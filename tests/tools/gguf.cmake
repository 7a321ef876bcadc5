# GGUF files through the weft command. make_gguf (tests/fixtures/gguf) writes weft-tiny as
# GGUF into the build folder first (a ctest fixture: the files are ~90 MB, too big to commit).
if(TARGET make_gguf)
  set(gguf_dir ${CMAKE_BINARY_DIR}/test-data/gguf)
  set(tiny ${CMAKE_SOURCE_DIR}/models/weft-tiny)
  add_test(NAME weft_gguf_make_files COMMAND make_gguf ${tiny} ${gguf_dir} f32 q8_0)
  set_tests_properties(weft_gguf_make_files PROPERTIES FIXTURES_SETUP gguf_files
    PASS_REGULAR_EXPRESSION "weft-tiny-q8_0.gguf: 57 matrices q8_0")

  # The F32 file continues a prompt exactly as the safetensors folder does.
  set(gen "$<TARGET_FILE:weft> generate --prompt \"Call me Ishmael.\" --max-tokens 16 --format json --model")
  add_test(NAME weft_gguf_generate_matches_folder
           COMMAND sh -c "a=$(${gen} ${tiny}) && b=$(${gen} ${gguf_dir}/weft-tiny-f32.gguf) && echo \"$b\" && [ \"$a\" = \"$b\" ]")
  set_tests_properties(weft_gguf_generate_matches_folder PROPERTIES FIXTURES_REQUIRED gguf_files
    PASS_REGULAR_EXPRESSION "\"completion_tokens\":16,")
  add_test(NAME weft_gguf_perplexity_q8_0
           COMMAND weft perplexity --model ${gguf_dir}/weft-tiny-q8_0.gguf
                   --file ${tiny}/heldout-head.txt --window 256 --stride 128 --format json)
  set_tests_properties(weft_gguf_perplexity_q8_0 PROPERTIES FIXTURES_REQUIRED gguf_files
    PASS_REGULAR_EXPRESSION "\"tokens_scored\":3162,\"tokens\":3163,")
  # A constrained request reads its vocabulary from the file's tokenizer metadata.
  add_test(NAME weft_gguf_generate_regex
           COMMAND weft generate --model ${gguf_dir}/weft-tiny-q8_0.gguf --prompt "The sea" --max-tokens 8 --regex "[a-z ]+")
  set_tests_properties(weft_gguf_generate_regex PROPERTIES FIXTURES_REQUIRED gguf_files
    PASS_REGULAR_EXPRESSION "^[a-z ]+\n$")
  # A cut file and a file that is not GGUF: errors naming the file, the tensor or the magic.
  add_test(NAME weft_gguf_truncated
           COMMAND sh -c "head -c 1000000 ${gguf_dir}/weft-tiny-q8_0.gguf > ${gguf_dir}/cut.gguf && \"$<TARGET_FILE:weft>\" generate --model ${gguf_dir}/cut.gguf --prompt-ids 1 2>&1; echo exit=$?")
  set_tests_properties(weft_gguf_truncated PROPERTIES FIXTURES_REQUIRED gguf_files
    PASS_REGULAR_EXPRESSION "cut.gguf: tensor \"[a-z0-9_.]+\" \\(Q8_0, [0-9]+ bytes\\) at byte [0-9]+ runs past the end of the 1000000-byte file[^\n]*\nexit=1\n$")
  add_test(NAME weft_gguf_bad_magic
           COMMAND sh -c "echo 'not a model' > ${gguf_dir}/text.gguf && \"$<TARGET_FILE:weft>\" generate --model ${gguf_dir}/text.gguf --prompt-ids 1 2>&1; echo exit=$?")
  set_tests_properties(weft_gguf_bad_magic PROPERTIES FIXTURES_REQUIRED gguf_files
    PASS_REGULAR_EXPRESSION "text.gguf: at byte 0: bad magic \"not \": expected \"GGUF\"[^\n]*\nexit=1\n$")
endif()
