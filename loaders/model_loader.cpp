#include "loaders/model_loader.hpp"

#include <cstdlib>

#include "loaders/bundled_path.hpp"
#include "loaders/model_spec_file.hpp"

namespace weft {

std::filesystem::path default_spec_dir() {
  if (const char* env = std::getenv("WEFT_SPEC_DIR"); env != nullptr && *env != '\0') return env;
  return bundled_path("config/models");
}

Result<LoadedModel> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Error(ErrorCode::kNotFound, dir.string() + ": not a model folder (no such directory)");
  }
  const auto config_json = dir / "config.json";
  if (!std::filesystem::exists(config_json, ec)) {
    return Error(ErrorCode::kNotFound, config_json.string() +
                                           ": missing; a model folder needs "
                                           "config.json");
  }
  LoadedModel out;
  if (!options.spec_file.empty()) {
    out.spec_file = options.spec_file;
  } else {
    auto found = find_spec_file(options.spec_dir.empty() ? default_spec_dir() : options.spec_dir,
                                config_json);
    if (!found) return found.error();
    out.spec_file = found.value();
  }
  auto spec = read_model_spec(out.spec_file, config_json);
  if (!spec) return spec.error();
  auto generation = read_generation_defaults(dir);
  if (!generation) return generation.error();
  out.generation = std::move(generation.value());
  auto files = WeightFiles::open_folder(dir);
  if (!files) return files.error();
  out.weights = std::make_shared<const WeightFiles>(std::move(files.value()));
  const auto weights = out.weights;
  model::WeightLookup lookup{[weights](const std::string& name) { return weights->find(name); },
                             [weights](const std::string& name) { return weights->origin(name); },
                             dir.string()};
  auto model = model::Model::create(spec.value(), lookup);
  if (!model) return model.error();
  out.model = std::move(model.value());
  return out;
}

}  // namespace weft
