// Fuzzes the GGUF reader (loaders/gguf_file.cpp): the input is a whole .gguf file. A file that
// parses must have every tensor inside the bytes, which the loop checks by dequantizing each
// tensor's first row and reading its last byte (ASan sees a miss); then the model spec and the
// tokenizer are built from its metadata as load_gguf_model and load_gguf_tokenizer would.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "loaders/gguf_dequantize.hpp"
#include "loaders/gguf_file.hpp"
#include "loaders/gguf_model.hpp"
#include "loaders/gguf_tokenizer.hpp"
#include "loaders/tokenizer_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1 << 20)) return -1;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = weft::gguf::File::parse(bytes, "fuzz.gguf");
  if (!file) return 0;
  const weft::gguf::File& f = **file;
  volatile std::byte sink{};
  std::vector<float> row;
  for (const auto& t : f.tensors()) {
    const auto span = f.data(t);
    if (span.empty()) continue;
    sink = span.back();
    const auto g = weft::gguf::block_geometry(t.type);
    row.resize(t.dims[0]);
    weft::gguf::dequantize(t.type, span.first(t.dims[0] / g.block_elements * g.block_bytes), row);
  }
  (void)sink;
  (void)weft::gguf_model_spec(f);
  (void)weft::gguf_generation_defaults(f);
  auto json = weft::gguf_tokenizer_json(f);
  if (!json) return 0;
  auto tokenizer = weft::loaders::parse_tokenizer_json(*json, "fuzz.gguf");
  if (!tokenizer) return 0;
  auto ids = (*tokenizer)->encode("Hello world, caf\xc3\xa9 123", true);
  if (ids) (void)(*tokenizer)->decode(*ids, false);
  return 0;
}
