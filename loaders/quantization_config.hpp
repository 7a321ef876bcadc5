#pragma once
// The "quantization" entry of a quantized model folder's config.json (docs/quantization.md):
//   "quantization": {"format": "q4_b32", "bits_per_weight": 5.0, "quantized": "linear"}
// Only "format" is read; the rest is for people.

#include <filesystem>

#include "kernels/cpu/quant/format.hpp"
#include "weft/error.hpp"

namespace weft {

// kNone when config.json has no "quantization" entry. An entry without a string "format",
// or with a format Weft does not know, is an error naming the file and the value.
Result<quant::QuantType> read_weight_quantization(const std::filesystem::path& config_json);

}  // namespace weft
