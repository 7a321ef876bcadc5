#include <simdjson.h>

#include <algorithm>
#include <string>

#include "actors/device_backend.hpp"
#include "kernels/cpu/quant/format.hpp"
#include "runtime/kv/kv_compress.hpp"
#include "runtime/parallel/communicator.hpp"
#include "weft/engine.hpp"

namespace weft {
namespace {

Error field_error(const std::filesystem::path& path, std::string_view field, const char* expected) {
  return Error(ErrorCode::kParse,
               path.string() + ": field \"" + std::string(field) + "\" must be " + expected);
}

}  // namespace

Result<EngineConfig> EngineConfig::from_file(const std::filesystem::path& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto error = parser.load(path.string()).get(root); error) {
    return Error(error == simdjson::IO_ERROR ? ErrorCode::kNotFound : ErrorCode::kParse,
                 path.string() + ": " + simdjson::error_message(error));
  }
  simdjson::dom::object object;
  if (root.get(object) != simdjson::SUCCESS) {
    return Error(ErrorCode::kParse, path.string() + ": expected a JSON object");
  }
  EngineConfig c;
  for (auto [key, value] : object) {
    auto as_string = [&, key = key, value = value](std::string& out) -> Result<void> {
      std::string_view v;
      if (value.get(v) != simdjson::SUCCESS) return field_error(path, key, "a string");
      out = std::string(v);
      return {};
    };
    auto as_int = [&, key = key, value = value](auto& out) -> Result<void> {
      std::int64_t v = 0;
      if (value.get(v) != simdjson::SUCCESS) return field_error(path, key, "an integer");
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return {};
    };
    Result<void> ok;
    if (key == "model_dir") {
      ok = as_string(c.model_dir);
    } else if (key == "spec_file") {
      ok = as_string(c.spec_file);
    } else if (key == "device") {
      ok = as_string(c.device);
    } else if (key == "quantize") {
      ok = as_string(c.quantize);
    } else if (key == "admission") {
      ok = as_string(c.admission);
    } else if (key == "schedule_policy") {
      ok = as_string(c.schedule_policy);
    } else if (key == "kv_cache_dtype") {
      ok = as_string(c.kv_cache_dtype);
    } else if (key == "page_size") {
      ok = as_int(c.page_size);
    } else if (key == "kv_budget_bytes") {
      ok = as_int(c.kv_budget_bytes);
    } else if (key == "max_tokens_per_step") {
      ok = as_int(c.max_tokens_per_step);
    } else if (key == "max_running") {
      ok = as_int(c.max_running);
    } else if (key == "gpu_memory_fraction") {
      double v = 0;
      if (value.get(v) != simdjson::SUCCESS) {
        ok = field_error(path, key, "a number");
      } else {
        c.gpu_memory_fraction = v;
      }
    } else if (key == "kv_compress_rate") {
      double v = 0;
      if (value.get(v) != simdjson::SUCCESS) {
        ok = field_error(path, key, "a number");
      } else {
        c.kv_compress_rate = v;
      }
    } else if (key == "kv_compress_window") {
      ok = as_int(c.kv_compress_window);
    } else if (key == "kv_compress_heads") {
      ok = as_string(c.kv_compress_heads);
    } else if (key == "cpu_threads") {
      ok = as_int(c.cpu_threads);
    } else if (key == "cpu_layers") {
      ok = as_int(c.cpu_layers);
    } else if (key == "gpu_memory_budget_mb") {
      ok = as_int(c.gpu_memory_budget_mb);
    } else if (key == "micro_batches") {
      ok = as_int(c.micro_batches);
    } else if (key == "pp_groups") {
      ok = as_int(c.pp_groups);
    } else if (key == "prefix_cache") {
      bool v = true;
      if (value.get(v) != simdjson::SUCCESS) {
        ok = field_error(path, key, "true or false");
      } else {
        c.prefix_cache = v;
      }
    } else if (key == "overlap_steps") {
      bool v = true;
      if (value.get(v) != simdjson::SUCCESS) {
        ok = field_error(path, key, "true or false");
      } else {
        c.overlap_steps = v;
      }
    } else if (key == "speculate") {
      ok = as_string(c.speculate);
    } else if (key == "draft_model_dir") {
      ok = as_string(c.draft_model_dir);
    } else if (key == "spec_tokens") {
      ok = as_int(c.spec_tokens);
    } else if (key == "spec_width") {
      ok = as_int(c.spec_width);
    } else if (key == "spec_step_budget") {
      ok = as_int(c.spec_step_budget);
    } else if (key == "draft_kv_budget_bytes") {
      ok = as_int(c.draft_kv_budget_bytes);
    } else if (key == "draft_device") {
      ok = as_string(c.draft_device);
    } else if (key == "jump_forward") {
      bool v = true;
      if (value.get(v) != simdjson::SUCCESS) {
        ok = field_error(path, key, "true or false");
      } else {
        c.jump_forward = v;
      }
    } else {
      return Error(
          ErrorCode::kParse,
          path.string() + ": unknown field \"" + std::string(key) +
              "\" (known: model_dir, spec_file, quantize, device, page_size, "
              "kv_budget_bytes, max_tokens_per_step, max_running, "
              "admission, schedule_policy, cpu_threads, gpu_memory_fraction, "
              "cpu_layers, "
              "gpu_memory_budget_mb, micro_batches, pp_groups, "
              "jump_forward, prefix_cache, overlap_steps, kv_cache_dtype, kv_compress_rate, "
              "kv_compress_window, kv_compress_heads, speculate, "
              "draft_model_dir, spec_tokens, spec_width, "
              "spec_step_budget, draft_kv_budget_bytes, draft_device)");
    }
    if (!ok) return ok.error();
  }
  if (auto ok = c.validate(); !ok)
    return Error(ok.error().code(), path.string() + ": " + ok.error().what());
  return c;
}

// 512 tokens keep a step that carries a prefill chunk close to a decode step on one device
// (docs/engine.md). On a GPU group each rank multiplies 1/N of the products, while NCCL's
// all-reduces cost about the same up to megabytes: 512 per GPU keeps each rank's share of a
// chunk step and spreads the all-reduces over N times the tokens (docs/parallel.md, "Large
// steps": on four H200s 2,048 tokens gave 22% more output tok/s than 512, with lower TPOT).
int EngineConfig::step_token_budget(bool cuda, int tensor_parallel_ranks) const {
  if (max_tokens_per_step > 0) return max_tokens_per_step;
  return 512 * (cuda ? std::max(1, tensor_parallel_ranks) : 1);
}

int EngineConfig::step_token_budget() const {
  if (max_tokens_per_step > 0) return max_tokens_per_step;  // no device to resolve
  const int ranks =
      tensor_parallel != nullptr ? tensor_parallel->size() / std::max(1, pipeline_parallel) : 1;
  const auto d = actors::parse_device(device);  // "auto" is a GPU where one is visible
  return step_token_budget(d && d->cuda, ranks);
}

Result<void> EngineConfig::validate() const {
  auto bad = [](const std::string& message) { return Error(ErrorCode::kInvalidArgument, message); };
  if (model_dir.empty()) return bad("model_dir: empty; give a Hugging Face model folder");
  auto d = actors::parse_device(device);
  if (!d) return bad(std::string("device: ") + d.error().what());
  if (auto kv = actors::resolve_kv_cache_dtype(kv_cache_dtype, *d); !kv)
    return bad(std::string("kv_cache_dtype: ") + kv.error().what());
  if (!quantize.empty()) {
    if (auto q = quant::parse_quant_type(quantize); !q) {
      return bad(std::string("quantize: ") + q.error().what());
    }
  }
  if (page_size < 1 || page_size > 4096) {
    return bad("page_size: " + std::to_string(page_size) + " is outside [1, 4096]");
  }
  if (kv_budget_bytes < 1) {
    return bad("kv_budget_bytes: " + std::to_string(kv_budget_bytes) + " must be > 0");
  }
  if (max_tokens_per_step < 0 || max_tokens_per_step > (1 << 20)) {
    return bad("max_tokens_per_step: " + std::to_string(max_tokens_per_step) +
               " is outside [0, 1048576] (0: the default, 512 per GPU of a tensor-parallel "
               "group)");
  }
  if (max_running < 1 || max_running > 65536) {
    return bad("max_running: " + std::to_string(max_running) + " is outside [1, 65536]");
  }
  if (!(gpu_memory_fraction >= 0.0 && gpu_memory_fraction < 1.0)) {
    return bad("gpu_memory_fraction: " + std::to_string(gpu_memory_fraction) +
               " is outside [0, 1) (0: size the KV pool from kv_budget_bytes)");
  }
  if (pipeline_parallel < 1 || pipeline_parallel > 1024) {
    return bad("pipeline_parallel: " + std::to_string(pipeline_parallel) + " is outside [1, 1024]");
  }
  if (micro_batches < 0 || micro_batches > 1024) {
    return bad("micro_batches: " + std::to_string(micro_batches) + " is outside [0, 1024]");
  }
  if (pp_groups < 0 || pp_groups > 64) {
    return bad("pp_groups: " + std::to_string(pp_groups) + " is outside [0, 64]");
  }
  if (cpu_layers < 0) return bad("cpu_layers: " + std::to_string(cpu_layers) + " is negative");
  if (gpu_memory_budget_mb < 0) {
    return bad("gpu_memory_budget_mb: " + std::to_string(gpu_memory_budget_mb) + " is negative");
  }
  if (cpu_layers > 0 && gpu_memory_budget_mb > 0) {
    return bad("cpu_layers and gpu_memory_budget_mb both choose the CPU's layers; give one");
  }
  if ((cpu_layers > 0 || gpu_memory_budget_mb > 0) && !d->cuda) {
    return bad(std::string(cpu_layers > 0 ? "cpu_layers" : "gpu_memory_budget_mb") +
               ": keeps layers on the CPU beside a GPU; device \"" + device +
               "\" runs every layer on the CPU already");
  }
  if (!speculate.empty() && speculate != "prompt-lookup" && speculate != "draft") {
    return bad("speculate: \"" + speculate +
               "\" must be empty (off), \"prompt-lookup\" or \"draft\"");
  }
  if (speculate == "draft" && draft_model_dir.empty()) {
    return bad("draft_model_dir: empty; speculate \"draft\" needs a draft model folder");
  }
  if (spec_tokens < 1 || spec_tokens > 64) {
    return bad("spec_tokens: " + std::to_string(spec_tokens) + " is outside [1, 64]");
  }
  if (spec_width < 1 || spec_width > 16) {
    return bad("spec_width: " + std::to_string(spec_width) + " is outside [1, 16]");
  }
  if (spec_step_budget < 0 || spec_step_budget > (1 << 20)) {
    return bad("spec_step_budget: " + std::to_string(spec_step_budget) +
               " is outside [0, 1048576]");
  }
  if (draft_device != "auto" && draft_device != "cpu") {
    return bad("draft_device: \"" + draft_device +
               "\" must be \"auto\" (the model's device) or \"cpu\"");
  }
  if (draft_kv_budget_bytes < 1) {
    return bad("draft_kv_budget_bytes: " + std::to_string(draft_kv_budget_bytes) + " must be > 0");
  }
  if (auto ok = kv::check(kv::KvCompressConfig{kv_compress_rate, kv_compress_window}); !ok) {
    return bad(ok.error().what());
  }
  if (auto heads = kv::parse_kv_compress_heads(kv_compress_heads); !heads) {
    return bad(heads.error().what());
  }
  if (kv_compress_rate > 0.0 && !speculate.empty()) {
    return bad("kv_compress_rate > 0 and speculate \"" + speculate + "\" do not mix");
  }
  if (admission != "reserve" && admission != "optimistic") {
    return bad("admission: \"" + admission + "\" must be \"reserve\" or \"optimistic\"");
  }
  if (schedule_policy != "fcfs" && schedule_policy != "lof") {
    return bad("schedule_policy: \"" + schedule_policy + "\" must be \"fcfs\" or \"lof\"");
  }
  return {};
}

}  // namespace weft
