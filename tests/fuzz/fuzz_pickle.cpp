// Fuzzes the restricted unpickler (loaders/pickle_reader.cpp) on a bare pickle stream, as it
// reads the data.pkl of a PyTorch checkpoint: only allow-listed globals, bounded nesting.
#include <cstddef>
#include <cstdint>
#include <span>

#include "loaders/pickle_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (64 << 10)) return -1;
  auto value = weft::read_pickle(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), "fuzz.pkl");
  (void)value;
  return 0;
}
