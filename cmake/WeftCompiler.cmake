# Warnings, ccache and sanitizer flags shared by every Weft target.
find_program(WEFT_CCACHE ccache)
if(WEFT_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${WEFT_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${WEFT_CCACHE})
endif()

add_library(weft_warnings INTERFACE)
target_compile_options(weft_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>)

if(WEFT_SANITIZE STREQUAL "address")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
elseif(WEFT_SANITIZE STREQUAL "thread")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
elseif(WEFT_SANITIZE STREQUAL "fuzzer")
  # The fuzz preset (clang only): every library gets libFuzzer's coverage hooks plus ASan and
  # UBSan; the fuzz targets of tests/fuzz add -fsanitize=fuzzer (libFuzzer's main) at link.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "WEFT_SANITIZE=fuzzer needs clang (the fuzz preset uses clang++-14)")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT WEFT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "WEFT_SANITIZE must be empty, 'address', 'thread' or 'fuzzer', not '${WEFT_SANITIZE}'")
endif()
