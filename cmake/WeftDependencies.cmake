# Every dependency comes from Debian packages installed by scripts/setup.
find_package(Threads REQUIRED)
# Boost's compiled parts link statically so binaries built here also run on the GPU machine.
set(Boost_USE_STATIC_LIBS ON)
find_package(Boost 1.81 CONFIG REQUIRED COMPONENTS json)
find_package(CLI11 CONFIG REQUIRED)
find_package(simdjson CONFIG REQUIRED)
if(WEFT_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(WEFT_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
