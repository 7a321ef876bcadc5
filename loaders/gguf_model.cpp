#include "loaders/gguf_model.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/vector_math.hpp"
#include "loaders/gguf_dequantize.hpp"
#include "runtime/model/quantize_weights.hpp"
#include "runtime/parallel/partition_plan.hpp"
#include "runtime/parallel/sharded_weights.hpp"

namespace weft {
namespace {

constexpr const char* kArch = "llama";

#define GGUF_TRY(var, expr)                       \
  auto var##_result = (expr);                     \
  if (!var##_result) return var##_result.error(); \
  auto var = std::move(var##_result.value())

Error key_error(const gguf::File& file, const std::string& key, const std::string& what) {
  return Error(ErrorCode::kParse, file.source() + ": metadata \"" + key + "\" " + what);
}

Result<int> positive_int(const gguf::File& file, const std::string& key,
                         std::optional<int> fallback) {
  auto v = file.get_integer(key);
  if (!v) return v.error();
  if (!v->has_value()) {
    if (fallback) return *fallback;
    return Error(ErrorCode::kNotFound, file.source() + ": metadata \"" + key +
                                           "\" is missing; a llama GGUF file needs it");
  }
  if (**v <= 0 || **v > (std::int64_t{1} << 30)) {
    return key_error(file, key, "is " + std::to_string(**v) + ", expected a positive count");
  }
  return static_cast<int>(**v);
}

Result<double> number_or(const gguf::File& file, const std::string& key, double fallback) {
  auto v = file.get_number(key);
  if (!v) return v.error();
  return v->value_or(fallback);
}

// Converts GGUF tensors into TensorViews the Model binds, on first request, and keeps them.
// Views of F32/F16/BF16 tensors point into the mapping; anything else owns a buffer.
class TensorSource {
 public:
  TensorSource(std::shared_ptr<const gguf::File> file, DType dequantize_to,
               std::map<std::string, int> rope_heads)
      : file_(std::move(file)), dequantize_to_(dequantize_to), rope_heads_(std::move(rope_heads)) {}

  const TensorView* find(const std::string& name) {
    std::lock_guard lock(mutex_);
    if (auto it = views_.find(name); it != views_.end()) return &it->second;
    const gguf::TensorInfo* info = file_->find_tensor(name);
    if (info == nullptr) return nullptr;
    auto view = convert(*info);
    if (!view) {
      error_ = view.error().what();
      return nullptr;
    }
    return &views_.emplace(name, std::move(view.value())).first->second;
  }
  // The conversion error behind the last nullptr from find() of a tensor the file holds.
  const std::string& error() const { return error_; }
  const gguf::File& file() const { return *file_; }

 private:
  Result<TensorView> convert(const gguf::TensorInfo& info) {
    TensorView view;
    view.shape = info.shape();
    const auto bytes = file_->data(info);
    switch (info.type) {
      case gguf::TensorType::kF32:
        view.dtype = DType::kF32;
        break;
      case gguf::TensorType::kF16:
        view.dtype = DType::kF16;
        break;
      case gguf::TensorType::kBF16:
        view.dtype = DType::kBF16;
        break;
      default:
        view.dtype = dequantize_to_;
    }
    const auto rope = rope_heads_.find(info.name);
    const bool permuted = rope != rope_heads_.end();
    const bool quantized = gguf::block_geometry(info.type).block_elements > 1;
    if (!quantized && !permuted) {
      view.data = bytes.data();
      view.owner = file_;
      return view;
    }
    const std::size_t element = dtype_size(view.dtype);
    const std::size_t total = static_cast<std::size_t>(info.numel()) * element;
    auto buffer = std::make_shared<std::vector<std::uint64_t>>((total + 7) / 8);
    auto* out = reinterpret_cast<std::byte*>(buffer->data());
    if (quantized) {
      const auto cols = static_cast<std::size_t>(info.dims[0]);
      const std::size_t rows = static_cast<std::size_t>(info.numel()) / cols;
      const std::size_t in_row_bytes = bytes.size() / rows;
      const DType dtype = view.dtype;
      auto run = [&, dtype](std::size_t begin, std::size_t end) {
        std::vector<float> row(cols);
        for (std::size_t r = begin; r < end; ++r) {
          gguf::dequantize(info.type, bytes.subspan(r * in_row_bytes, in_row_bytes), row);
          std::byte* dst = out + r * cols * element;
          if (dtype == DType::kF32) {
            std::memcpy(dst, row.data(), cols * element);
            continue;
          }
          auto* half = reinterpret_cast<std::uint16_t*>(dst);
          for (std::size_t c = 0; c < cols; ++c) {
            half[c] = dtype == DType::kBF16 ? cpu::f32_to_bf16(row[c]) : cpu::f32_to_f16(row[c]);
          }
        }
      };
      // Large tensors (an 8B model's are 16-500M values) dequantize on several threads: a
      // single core would take most of a minute for the whole model.
      const std::size_t threads = std::min<std::size_t>(
          {std::max(1u, std::thread::hardware_concurrency()), 16,
           static_cast<std::size_t>(info.numel() / (std::size_t{1} << 20)) + 1});
      if (threads <= 1) {
        run(0, rows);
      } else {
        std::vector<std::thread> workers;
        const std::size_t per = (rows + threads - 1) / threads;
        for (std::size_t t = 0; t < threads && t * per < rows; ++t) {
          workers.emplace_back(run, t * per, std::min(rows, (t + 1) * per));
        }
        for (auto& w : workers)
          w.join();
      }
    } else {
      std::memcpy(out, bytes.data(), total);
    }
    if (permuted) {
      // Undo the converter's interleaving along the outermost dimension (rows of a weight,
      // elements of a bias), head by head.
      const std::int64_t outer = view.shape[0];
      const int heads = rope->second;
      if (heads <= 0 || outer % heads != 0 || (outer / heads) % 2 != 0) {
        return Error(ErrorCode::kInvalidArgument, file_->source() + ": tensor \"" + info.name +
                                                      "\" has " + std::to_string(outer) +
                                                      " rows, not " + std::to_string(heads) +
                                                      " heads of an even head size");
      }
      const std::size_t unit = total / static_cast<std::size_t>(outer);
      std::vector<std::byte> gguf_order(out, out + total);
      for (std::int64_t r = 0; r < outer; ++r) {
        std::memcpy(
            out + static_cast<std::size_t>(r) * unit,
            gguf_order.data() + static_cast<std::size_t>(gguf_rope_row(r, outer / heads)) * unit,
            unit);
      }
    }
    view.data = out;
    view.owner = buffer;
    return view;
  }

  std::shared_ptr<const gguf::File> file_;
  DType dequantize_to_;
  std::map<std::string, int> rope_heads_;  // tensor -> heads, for the permuted Q/K tensors
  std::mutex mutex_;
  std::map<std::string, TensorView> views_;
  std::string error_;
};

}  // namespace

bool is_gguf_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (path.extension() == ".gguf") return true;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

Result<model::ModelSpec> gguf_model_spec(const gguf::File& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch) return arch.error();
  if (!arch->has_value()) {
    return Error(ErrorCode::kNotFound,
                 file.source() + ": metadata \"general.architecture\" is missing");
  }
  if (**arch != kArch) {
    return Error(ErrorCode::kUnsupported,
                 file.source() + ": GGUF architecture \"" + **arch +
                     "\" is not supported (supported: llama, which covers Llama, Mistral and "
                     "other Llama-shaped models)");
  }
  const std::string p = std::string(kArch) + ".";
  model::ModelSpec s;
  s.architecture = "llama (GGUF)";
  GGUF_TRY(hidden, positive_int(file, p + "embedding_length", std::nullopt));
  GGUF_TRY(layers, positive_int(file, p + "block_count", std::nullopt));
  GGUF_TRY(ffn, positive_int(file, p + "feed_forward_length", std::nullopt));
  GGUF_TRY(heads, positive_int(file, p + "attention.head_count", std::nullopt));
  GGUF_TRY(kv_heads, positive_int(file, p + "attention.head_count_kv", heads));
  GGUF_TRY(head_dim, positive_int(file, p + "attention.key_length", hidden / heads));
  GGUF_TRY(value_dim, positive_int(file, p + "attention.value_length", head_dim));
  if (value_dim != head_dim) {
    return key_error(file, p + "attention.value_length",
                     "is " + std::to_string(value_dim) + " but key_length is " +
                         std::to_string(head_dim) + "; Weft needs them equal");
  }
  s.hidden_size = hidden;
  s.num_layers = layers;
  s.intermediate_size = ffn;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = head_dim;
  // The vocabulary: llama.vocab_size, else the token list, else token_embd's rows.
  std::optional<int> vocab;
  if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->type == gguf::ValueType::kArray) {
    vocab = static_cast<int>(tokens->size);
  }
  if (const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
      embd != nullptr && embd->dims.size() == 2) {
    vocab = static_cast<int>(embd->dims[1]);
  }
  GGUF_TRY(vocab_size, positive_int(file, p + "vocab_size", vocab));
  s.vocab_size = vocab_size;
  GGUF_TRY(eps, number_or(file, p + "attention.layer_norm_rms_epsilon", 1e-5));
  s.norm = model::Norm::kRms;
  s.norm_epsilon = eps;
  s.activation = model::Activation::kSilu;
  s.gated_mlp = true;
  s.position = model::PositionEmbedding::kRope;
  s.rope.order = model::RopeOrder::kHalfSplit;  // Q and K are permuted back at load
  GGUF_TRY(theta, number_or(file, p + "rope.freq_base", 10000.0));
  s.rope.theta = theta;
  GGUF_TRY(context, positive_int(file, p + "context_length", 2048));
  s.rope.max_position_embeddings = context;
  GGUF_TRY(rotary, positive_int(file, p + "rope.dimension_count", head_dim));
  if (rotary > head_dim) {
    return key_error(
        file, p + "rope.dimension_count",
        "is " + std::to_string(rotary) + ", larger than the head size " + std::to_string(head_dim));
  }
  s.rope.partial_rotary_factor = static_cast<double>(rotary) / head_dim;
  auto scaling = file.get_string(p + "rope.scaling.type");
  if (!scaling) return scaling.error();
  GGUF_TRY(factor, number_or(file, p + "rope.scaling.factor", 0.0));
  GGUF_TRY(linear, number_or(file, p + "rope.scale_linear", 0.0));  // older files
  const std::string scaling_type = scaling->value_or(linear > 0 ? "linear" : "none");
  if (scaling_type == "linear") {
    s.rope.scaling = model::RopeScaling::kLinear;
    s.rope.factor = factor > 0 ? factor : linear;
  } else if (scaling_type == "yarn") {
    s.rope.scaling = model::RopeScaling::kYarn;
    s.rope.factor = factor;
    GGUF_TRY(original, positive_int(file, p + "rope.scaling.original_context_length", context));
    s.rope.original_max_position_embeddings = original;
  } else if (scaling_type != "none") {
    return key_error(file, p + "rope.scaling.type",
                     "is \"" + scaling_type + "\", expected none, linear or yarn");
  }
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    // Llama 3.1-style scaling is stored as per-frequency factors, which Weft's rope does not
    // take yet; refusing beats generating from the wrong positions.
    return Error(ErrorCode::kUnsupported,
                 file.source() +
                     ": tensor \"rope_freqs.weight\" (Llama 3.1 rope scaling factors) is not "
                     "supported yet");
  }
  s.qkv_layout = model::QkvLayout::kSeparate;
  s.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  s.output_bias = file.find_tensor("blk.0.attn_output.bias") != nullptr;
  s.mlp_bias = file.find_tensor("blk.0.ffn_up.bias") != nullptr;
  s.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  auto& t = s.tensors;
  t.embedding = "token_embd.weight";
  t.final_norm = "output_norm.weight";
  t.lm_head = "output.weight";
  t.attn_norm = "blk.{layer}.attn_norm.weight";
  t.mlp_norm = "blk.{layer}.ffn_norm.weight";
  t.q = "blk.{layer}.attn_q.weight";
  t.k = "blk.{layer}.attn_k.weight";
  t.v = "blk.{layer}.attn_v.weight";
  t.o = "blk.{layer}.attn_output.weight";
  t.gate = "blk.{layer}.ffn_gate.weight";
  t.up = "blk.{layer}.ffn_up.weight";
  t.down = "blk.{layer}.ffn_down.weight";
  if (auto bad = model::validate(s)) {
    return Error(ErrorCode::kInvalidArgument, file.source() + ": " + *bad);
  }
  return s;
}

Result<model::GenerationDefaults> gguf_generation_defaults(const gguf::File& file) {
  model::GenerationDefaults out;
  auto id = [&](const char* key) -> Result<std::optional<int>> {
    auto v = file.get_integer(key);
    if (!v) return v.error();
    if (!v->has_value()) return std::optional<int>();
    if (**v < 0 || **v >= (std::int64_t{1} << 24)) {
      return key_error(file, key, "is " + std::to_string(**v) + ", not a token id");
    }
    return std::optional<int>(static_cast<int>(**v));
  };
  GGUF_TRY(eos, id("tokenizer.ggml.eos_token_id"));
  GGUF_TRY(eot, id("tokenizer.ggml.eot_token_id"));
  GGUF_TRY(bos, id("tokenizer.ggml.bos_token_id"));
  GGUF_TRY(pad, id("tokenizer.ggml.padding_token_id"));
  if (eos) out.eos_token_ids.push_back(*eos);
  if (eot && eot != eos) out.eos_token_ids.push_back(*eot);
  out.bos_token_id = bos;
  out.pad_token_id = pad;
  return out;
}

Result<LoadedModel> load_gguf_model(const std::filesystem::path& path, const LoadOptions& options,
                                    const GgufLoadOptions& gguf_options) {
  if (gguf_options.dequantize_to != DType::kBF16 && gguf_options.dequantize_to != DType::kF16 &&
      gguf_options.dequantize_to != DType::kF32) {
    return Error(ErrorCode::kInvalidArgument,
                 "GGUF tensors dequantize to F32, F16 or BF16, not " +
                     std::string(dtype_name(gguf_options.dequantize_to)));
  }
  auto file = gguf::File::open(path);
  if (!file) return file.error();
  auto spec = gguf_model_spec(**file);
  if (!spec) return spec.error();
  auto generation = gguf_generation_defaults(**file);
  if (!generation) return generation.error();
  std::map<std::string, int> rope_heads;
  for (int layer = 0; layer < spec->num_layers; ++layer) {
    const std::string blk = "blk." + std::to_string(layer) + ".";
    rope_heads[blk + "attn_q.weight"] = spec->num_heads;
    rope_heads[blk + "attn_q.bias"] = spec->num_heads;
    rope_heads[blk + "attn_k.weight"] = spec->num_kv_heads;
    rope_heads[blk + "attn_k.bias"] = spec->num_kv_heads;
  }
  auto source = std::make_shared<TensorSource>(file.value(), gguf_options.dequantize_to,
                                               std::move(rope_heads));
  const std::string where = path.string();
  model::WeightLookup lookup{[source](const std::string& name) { return source->find(name); },
                             [where](const std::string&) { return where; }, where};
  if (options.quantize != quant::QuantType::kNone) {
    // --quantize: the dequantized tensors requantized to a Weft block format
    // (docs/quantization.md).
    if (options.tensor_parallel_size > 1) {
      return Error(ErrorCode::kUnsupported,
                   where +
                       ": quantized weights do not load as tensor-parallel shards yet; run "
                       "them on one rank");
    }
    cpu::ThreadPool pool(options.quantize_threads);
    auto quantized = model::quantize_weights(lookup, spec.value(), options.quantize, &pool,
                                             options.on_quantize_progress);
    if (!quantized) {
      if (!source->error().empty()) return Error(ErrorCode::kInvalidArgument, source->error());
      return quantized.error();
    }
    lookup = std::move(quantized.value());
  }
  LoadedModel out;
  out.spec_file = path;
  out.generation = std::move(generation.value());
  auto model = model::Model::create(spec.value(), lookup);
  if (!model) {
    if (!source->error().empty()) return Error(ErrorCode::kInvalidArgument, source->error());
    return model.error();
  }
  out.full_spec = spec.value();
  if (options.tensor_parallel_size > 1) {
    if (options.tensor_parallel_rank < 0 ||
        options.tensor_parallel_rank >= options.tensor_parallel_size) {
      return Error(ErrorCode::kInvalidArgument,
                   "tensor-parallel rank " + std::to_string(options.tensor_parallel_rank) +
                       " is not in [0, " + std::to_string(options.tensor_parallel_size) + ")");
    }
    auto plan = parallel::plan_partition(spec.value(), options.tensor_parallel_size);
    if (!plan) return Error(plan.error().code(), where + ": " + plan.error().what());
    const auto& part = plan->ranks[static_cast<std::size_t>(options.tensor_parallel_rank)];
    model = model::Model::create(part.spec, parallel::shard_weights(lookup, part));
    if (!model) return model.error();
  }
  out.model = std::move(model.value());
  return out;
}

}  // namespace weft
