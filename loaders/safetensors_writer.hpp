#pragma once
// Writes a safetensors file (the format safetensors.hpp reads): an 8-byte little-endian header
// length, a JSON header padded with spaces to a multiple of 8 bytes, then the tensors' bytes
// back to back in the order given. Data is produced one tensor at a time, so a file larger
// than memory can be written (weft quantize makes each quantized tensor as it is written).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::size_t nbytes() const;
};

// `data(i)` returns entry i's bytes (its view must hold exactly entries[i].nbytes() bytes;
// an error from it stops the write). The file is written to a temporary name beside `path`
// and renamed at the end, so a failed write leaves no partial file under `path`.
Result<void> write_safetensors(const std::filesystem::path& path,
                               const std::vector<SafetensorsEntry>& entries,
                               const std::map<std::string, std::string>& metadata,
                               const std::function<Result<TensorView>(std::size_t)>& data);

}  // namespace weft
