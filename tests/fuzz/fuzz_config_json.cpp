// Fuzzes a model folder's config.json as the loader reads it (loaders/model_spec_file.cpp):
// the spec file is chosen from config.json's "architectures" among config/models (or
// $WEFT_SPEC_DIR), then resolved against the config; generation defaults are read from the
// same config.json (the folder has no generation_config.json). The spec folder is indexed
// once (read_spec_index): it is not the input, and reading its files again for each input
// was most of the time per input.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "loaders/model_loader.hpp"
#include "loaders/model_spec_file.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {
std::optional<weft::SpecIndex> specs;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  specs = weft::read_spec_index(weft::default_spec_dir());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (256 << 10)) return -1;
  const auto config = weft::fuzz::write_file("config.json", data, size);
  auto spec_file = weft::find_spec_file(*specs, config);
  if (spec_file) {
    auto spec = weft::read_model_spec(*spec_file, config);
    (void)spec;
  } else {
    // Every spec against this config: the resolution errors are the interesting part.
    for (const char* name : {"llama.json", "mistral.json", "qwen2.json"}) {
      auto spec = weft::read_model_spec(specs->dir / name, config);
      (void)spec;
    }
  }
  auto defaults = weft::read_generation_defaults(config.parent_path());
  (void)defaults;
  return 0;
}
