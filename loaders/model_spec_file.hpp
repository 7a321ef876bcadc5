#pragma once
// Model specification files (config/models/*.json, format in docs/model-spec.md): which
// atomic blocks an architecture uses, and where config.json keeps their numbers. Reading a
// spec together with a config.json yields a resolved model::ModelSpec.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"

namespace weft {

// Resolves `spec_file` against `config_json`. Errors name the file (spec or config), the field
// and what was expected.
Result<model::ModelSpec> read_model_spec(const std::filesystem::path& spec_file,
                                         const std::filesystem::path& config_json);

// The spec file in `spec_dir` whose "architectures" list holds one of config.json's
// "architectures". An unknown architecture is an error listing the known ones and saying how
// to add a spec file.
Result<std::filesystem::path> find_spec_file(const std::filesystem::path& spec_dir,
                                             const std::filesystem::path& config_json);

// The names each spec file of a folder covers ("architectures", "model_types"), read once for
// many find_spec_file calls (the overload above reads the folder each time).
struct SpecIndex {
  std::filesystem::path dir;
  std::vector<std::pair<std::string, std::filesystem::path>> architectures, model_types;
};
SpecIndex read_spec_index(const std::filesystem::path& spec_dir);
Result<std::filesystem::path> find_spec_file(const SpecIndex& specs,
                                             const std::filesystem::path& config_json);

// Architectures each spec file in `spec_dir` covers, sorted.
std::vector<std::string> known_architectures(const std::filesystem::path& spec_dir);

// eos/bos/pad ids from generation_config.json, or from config.json when the former is absent.
Result<model::GenerationDefaults> read_generation_defaults(const std::filesystem::path& model_dir);

}  // namespace weft
