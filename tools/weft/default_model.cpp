#include "tools/weft/default_model.hpp"

#include <cstdlib>

#include "loaders/bundled_path.hpp"

namespace weft::cli {

std::filesystem::path default_model_dir() {
  if (const char* env = std::getenv("WEFT_MODEL"); env != nullptr && *env != '\0') return env;
  return bundled_path("models/weft-tiny");
}

CLI::Option* add_model_option(CLI::App* cmd, std::string& dir) {
  dir = default_model_dir().string();
  return cmd
      ->add_option("--model", dir,
                   "Hugging Face model folder (config.json, *.safetensors or pytorch_model.bin, "
                   "tokenizer.json), or a GGUF file (docs/loading.md); "
                   "default: $WEFT_MODEL, else the bundled weft-tiny")
      ->default_str(dir);
}

}  // namespace weft::cli
