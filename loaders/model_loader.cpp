#include "loaders/model_loader.hpp"

#include <cstdlib>

#include "loaders/bundled_path.hpp"
#include "loaders/gguf_model.hpp"
#include "loaders/model_spec_encoder.hpp"
#include "loaders/model_spec_file.hpp"
#include "loaders/quantization_config.hpp"
#include "runtime/model/quantize_weights.hpp"
#include "runtime/parallel/partition_plan.hpp"
#include "runtime/parallel/sharded_weights.hpp"

namespace weft {

std::filesystem::path default_spec_dir() {
  if (const char* env = std::getenv("WEFT_SPEC_DIR"); env != nullptr && *env != '\0') return env;
  return bundled_path("config/models");
}

Result<LoadedModel> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  if (is_gguf_file(dir)) return load_gguf_model(dir, options);
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
  auto stored_format = read_weight_quantization(config_json);
  if (!stored_format) return stored_format.error();
  const quant::QuantType stored = stored_format.value();
  if (stored != quant::QuantType::kNone && options.quantize != quant::QuantType::kNone &&
      options.quantize != stored) {
    return Error(ErrorCode::kInvalidArgument,
                 dir.string() + " is already quantized (" +
                     std::string(quant::quant_info(stored).name) + "); it cannot be quantized to " +
                     std::string(quant::quant_info(options.quantize).name) +
                     " (quantize the original F32/F16/BF16 checkpoint instead)");
  }
  const bool quantized =
      stored != quant::QuantType::kNone || options.quantize != quant::QuantType::kNone;
  // Quantized on load (--quantize), a rank quantizes its own shard (below); a checkpoint
  // stored quantized would need its blocks cut between ranks.
  if (stored != quant::QuantType::kNone && options.tensor_parallel_size > 1) {
    return Error(ErrorCode::kUnsupported,
                 dir.string() + ": a checkpoint stored quantized (" +
                     std::string(quant::quant_info(stored).name) +
                     ") does not load as tensor-parallel shards yet; load the original "
                     "F32/F16/BF16 checkpoint with --quantize instead, or run it on one rank");
  }
  auto generation = read_generation_defaults(dir);
  if (!generation) return generation.error();
  out.generation = std::move(generation.value());
  auto files = WeightFiles::open_folder(dir);
  if (!files) return files.error();
  out.weights = std::make_shared<const WeightFiles>(std::move(files.value()));
  const auto weights = out.weights;
  model::WeightLookup lookup{[weights](const std::string& name) { return weights->find(name); },
                             [weights](const std::string& name) { return weights->origin(name); },
                             dir.string(), stored};
  if (spec->network == model::Network::kEncoderOnly) {
    if (!options.allow_encoder) {
      return Error(ErrorCode::kUnsupported,
                   dir.string() + ": " + spec->architecture +
                       " is an encoder-only model: it embeds text rather than generating it "
                       "(use `weft embed`, or POST /v1/embeddings on `weft serve`)");
    }
    if (options.tensor_parallel_size > 1) {
      return Error(ErrorCode::kUnsupported,
                   dir.string() + ": encoder-only models do not run tensor-parallel");
    }
    if (auto ok = read_sentence_transformers_pooling(dir, spec->encoder); !ok) return ok.error();
    auto encoder = model::EncoderModel::create(spec.value(), lookup);
    if (!encoder) return encoder.error();
    out.full_spec = spec.value();
    out.encoder = std::move(encoder.value());
    return out;
  }
  if (spec->network == model::Network::kEncoderDecoder) {
    if (!options.allow_seq2seq) {
      return Error(ErrorCode::kUnsupported,
                   dir.string() + ": " + spec->architecture +
                       " is an encoder-decoder model; it runs with `weft generate`, `weft "
                       "serve` and `weft bench` in one process (not tensor- or "
                       "pipeline-parallel, and not with this command yet)");
    }
    if (options.tensor_parallel_size > 1 || quantized) {
      return Error(ErrorCode::kUnsupported,
                   dir.string() +
                       ": encoder-decoder models do not run tensor-parallel or with "
                       "quantized weights yet");
    }
    auto seq2seq = model::Seq2SeqModel::create(spec.value(), lookup);
    if (!seq2seq) return seq2seq.error();
    out.full_spec = spec.value();
    out.seq2seq = std::move(seq2seq.value());
    return out;
  }
  // A tensor-parallel rank or a pipeline stage quantizes only what it binds (its shard of its
  // stage's layers, and the head), after the split.
  const bool split = options.tensor_parallel_size > 1 || options.pipeline_parallel_size > 1;
  const bool quantize_part =
      split && stored == quant::QuantType::kNone && options.quantize != quant::QuantType::kNone;
  if (stored == quant::QuantType::kNone && options.quantize != quant::QuantType::kNone &&
      !quantize_part) {
    cpu::ThreadPool pool(options.quantize_threads);
    auto quantized_lookup = model::quantize_weights(lookup, spec.value(), options.quantize, &pool,
                                                    options.on_quantize_progress);
    if (!quantized_lookup) return quantized_lookup.error();
    lookup = std::move(quantized_lookup.value());
  }
  auto model = model::Model::create(spec.value(), lookup);
  if (!model) return model.error();
  out.full_spec = spec.value();
  if (split) {
    // The whole checkpoint was checked above (binding only maps views), so a bad shape is
    // reported against the model's numbers; now bind this rank's slices and layers.
    if (options.tensor_parallel_rank < 0 ||
        options.tensor_parallel_rank >= options.tensor_parallel_size) {
      return Error(ErrorCode::kInvalidArgument,
                   "tensor-parallel rank " + std::to_string(options.tensor_parallel_rank) +
                       " is not in [0, " + std::to_string(options.tensor_parallel_size) + ")");
    }
    if (options.pipeline_stage < 0 || options.pipeline_stage >= options.pipeline_parallel_size) {
      return Error(ErrorCode::kInvalidArgument,
                   "pipeline stage " + std::to_string(options.pipeline_stage) + " is not in [0, " +
                       std::to_string(options.pipeline_parallel_size) + ")");
    }
    auto plan = parallel::plan_partition(spec.value(), options.tensor_parallel_size,
                                         options.pipeline_parallel_size);
    if (!plan) {
      return Error(plan.error().code(), dir.string() + ": " + plan.error().what());
    }
    const auto& part = plan->ranks[static_cast<std::size_t>(
        options.pipeline_stage * options.tensor_parallel_size + options.tensor_parallel_rank)];
    const model::LayerRange layers{static_cast<int>(part.layers.begin),
                                   static_cast<int>(part.layers.count)};
    model::WeightLookup mine =
        options.tensor_parallel_size > 1 ? parallel::shard_weights(lookup, part) : lookup;
    if (quantize_part) {  // this rank's matrices only, with their sharded shapes
      cpu::ThreadPool pool(options.quantize_threads);
      auto quantized = model::quantize_weights(mine, part.spec, options.quantize, &pool,
                                               options.on_quantize_progress, layers);
      if (!quantized) {
        return Error(quantized.error().code(),
                     dir.string() + ": tensor-parallel rank " +
                         std::to_string(options.tensor_parallel_rank) + ", pipeline stage " +
                         std::to_string(options.pipeline_stage) + ": " + quantized.error().what());
      }
      mine = std::move(quantized.value());
    }
    model = model::Model::create(part.spec, mine, layers);
    if (!model) return model.error();
  }
  out.model = std::move(model.value());
  return out;
}

}  // namespace weft
