# Warnings, ccache and sanitizer flags shared by every Weft target.
find_program(WEFT_CCACHE ccache)
if(WEFT_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${WEFT_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${WEFT_CCACHE})
endif()

add_library(weft_warnings INTERFACE)
target_compile_options(weft_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>)

# WEFT_FUZZ (clang only) adds libFuzzer's coverage hooks to every library and builds the fuzz
# targets of tests/fuzz; it goes with WEFT_SANITIZE=address (the asan and fuzz presets).
if(WEFT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "WEFT_FUZZ needs clang (the asan and fuzz presets use clang++-14)")
  endif()
  if(NOT WEFT_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "WEFT_FUZZ goes with WEFT_SANITIZE=address, not '${WEFT_SANITIZE}'")
  endif()
  set(WEFT_SANITIZE_FLAG "-fsanitize=fuzzer-no-link,address,undefined")
else()
  set(WEFT_SANITIZE_FLAG "-fsanitize=address,undefined")
endif()

if(WEFT_SANITIZE STREQUAL "address")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${WEFT_SANITIZE_FLAG}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
elseif(WEFT_SANITIZE STREQUAL "thread")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
elseif(NOT WEFT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "WEFT_SANITIZE must be empty, 'address' or 'thread', not '${WEFT_SANITIZE}'")
endif()
