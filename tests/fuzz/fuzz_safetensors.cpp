// Fuzzes the safetensors reader (loaders/safetensors.cpp): the input is a whole file (8-byte
// header length, JSON header, data). A file that opens must have every tensor inside the map,
// which the loop checks by reading each tensor's first and last byte (ASan sees a miss).
#include <cstddef>
#include <cstdint>

#include "loaders/safetensors.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1 << 20)) return -1;
  const auto path = weft::fuzz::write_file("model.safetensors", data, size);
  auto file = weft::SafetensorsFile::open(path);
  if (!file) return 0;
  volatile std::byte sink{};
  for (const auto& [name, view] : (*file)->tensors()) {
    const std::size_t n = view.nbytes();
    if (n == 0) continue;
    sink = view.data[0];
    sink = view.data[n - 1];
  }
  (void)sink;
  for (const auto& [k, v] : (*file)->metadata())
    (void)(k.size() + v.size());
  return 0;
}
