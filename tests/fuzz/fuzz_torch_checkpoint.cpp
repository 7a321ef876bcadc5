// Fuzzes a PyTorch checkpoint file (loaders/torch_checkpoint.cpp): the zip directory, the
// pickled state dict and the storages it points into. A file that opens must have every tensor
// inside the map, which the loop checks by reading each tensor's first and last byte.
#include <cstddef>
#include <cstdint>

#include "loaders/torch_checkpoint.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1 << 20)) return -1;
  const auto path = weft::fuzz::write_file("pytorch_model.bin", data, size);
  auto file = weft::TorchCheckpoint::open(path);
  if (!file) return 0;
  volatile std::byte sink{};
  for (const auto& [name, view] : (*file)->tensors()) {
    const std::size_t n = view.nbytes();
    if (n == 0) continue;
    sink = view.data[0];
    sink = view.data[n - 1];
  }
  (void)sink;
  return 0;
}
