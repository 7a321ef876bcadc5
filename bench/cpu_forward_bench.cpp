// CPU forward pass throughput: prefill (one step over the whole prompt) and decode (one token
// per step, KV in pages) tokens per second, for a model folder or for a ~100M-parameter
// random Llama-shaped model built in memory (nothing to download or commit).
//
//   cpu_forward_bench --model models/weft-tiny [--prompt-len 128] [--decode 32] [--threads 0]
//   cpu_forward_bench --random-100m [--dtype bf16|f16|f32] [--path auto|scalar|avx2|avx512]
//   either with [--quantize q4_b32] (docs/quantization.md)

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/quantize_weights.hpp"

namespace {

using namespace weft;

struct RandomModel {
  model::ModelSpec spec;
  std::map<std::string, TensorView> tensors;
};

// Llama-shaped, 12 layers of hidden 768 / MLP 2048 / 12 heads, 32000-token vocabulary with
// tied embeddings: 110M parameters, GPT-2-small sized.
RandomModel random_100m(DType dtype) {
  RandomModel m;
  auto& s = m.spec;
  s.architecture = "random-100m";
  s.vocab_size = 32000;
  s.hidden_size = 768;
  s.intermediate_size = 2048;
  s.num_layers = 12;
  s.num_heads = 12;
  s.num_kv_heads = 12;
  s.head_dim = 64;
  s.tied_embeddings = true;
  auto& n = s.tensors;
  n = {"embed",      "norm",         "", "l{layer}.attn_norm", "l{layer}.mlp_norm", "l{layer}.q",
       "l{layer}.k", "l{layer}.v",   "", "l{layer}.o",         "l{layer}.gate",     "l{layer}.up",
       "",           "l{layer}.down"};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, bool ones) {
    std::int64_t count = 1;
    for (auto d : shape)
      count *= d;
    const bool half = dtype != DType::kF32 && shape.size() == 2;
    auto bytes = std::make_shared<std::vector<std::uint16_t>>();
    auto floats = std::make_shared<std::vector<float>>();
    if (half) {
      bytes->resize(static_cast<std::size_t>(count));
      for (auto& v : *bytes) {
        const float x = dist(rng);
        v = dtype == DType::kF16 ? cpu::f32_to_f16(x) : cpu::f32_to_bf16(x);
      }
    } else {
      floats->resize(static_cast<std::size_t>(count));
      for (auto& v : *floats)
        v = ones ? 1.0f : dist(rng);
    }
    TensorView t;
    t.dtype = half ? dtype : DType::kF32;
    t.shape = std::move(shape);
    t.data = half ? reinterpret_cast<const std::byte*>(bytes->data())
                  : reinterpret_cast<const std::byte*>(floats->data());
    t.owner = half ? std::shared_ptr<const void>(bytes) : std::shared_ptr<const void>(floats);
    m.tensors[name] = std::move(t);
  };
  const std::int64_t H = s.hidden_size, I = s.intermediate_size;
  add("embed", {s.vocab_size, H}, false);
  add("norm", {H}, true);
  for (int l = 0; l < s.num_layers; ++l) {
    const std::string p = "l" + std::to_string(l) + ".";
    add(p + "attn_norm", {H}, true);
    add(p + "mlp_norm", {H}, true);
    for (auto w : {"q", "k", "v", "o"})
      add(p + w, {H, H}, false);
    add(p + "gate", {I, H}, false);
    add(p + "up", {I, H}, false);
    add(p + "down", {H, I}, false);
  }
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::int64_t parameters(const model::ModelSpec& s) {
  const std::int64_t H = s.hidden_size, I = s.intermediate_size;
  const std::int64_t per_layer = H * s.q_dim() * 2 + 2 * H * s.kv_dim() + 3 * H * I + 2 * H;
  return s.vocab_size * H * (s.tied_embeddings ? 1 : 2) + s.num_layers * per_layer + H;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, dtype_name = "bf16", path_name = "auto", quantize_name;
  bool random = false;
  int prompt_len = 128, decode = 32, repeats = 3;
  unsigned threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      model_dir = next();
    else if (a == "--random-100m")
      random = true;
    else if (a == "--dtype")
      dtype_name = next();
    else if (a == "--path")
      path_name = next();
    else if (a == "--quantize")
      quantize_name = next();
    else if (a == "--prompt-len")
      prompt_len = std::stoi(next());
    else if (a == "--decode")
      decode = std::stoi(next());
    else if (a == "--threads")
      threads = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--repeats")
      repeats = std::stoi(next());
    else {
      std::fprintf(stderr,
                   "usage: cpu_forward_bench (--model DIR | --random-100m [--dtype bf16|f16|f32])\n"
                   "  [--prompt-len N] [--decode N] [--threads N] [--path auto|scalar|avx2|avx512] "
                   "[--repeats N] [--quantize FORMAT]\n");
      return 2;
    }
  }
  cpu::KernelPath path = cpu::KernelPath::kAuto;
  if (path_name == "scalar") {
    path = cpu::KernelPath::kScalar;
  } else if (path_name == "avx2") {
    path = cpu::KernelPath::kAvx2;
  } else if (path_name == "avx512") {
    path = cpu::KernelPath::kAvx512;
  } else if (path_name != "auto") {
    std::fprintf(stderr, "--path: '%s' is not auto, scalar, avx2 or avx512\n", path_name.c_str());
    return 2;
  }
  quant::QuantType quantize = quant::QuantType::kNone;
  if (!quantize_name.empty()) {
    auto q = quant::parse_quant_type(quantize_name);
    if (!q) {
      std::fprintf(stderr, "--quantize: %s\n", q.error().what());
      return 2;
    }
    quantize = *q;
  }
  std::string name;
  Result<model::Model> built =
      Error(ErrorCode::kInvalidArgument, "give --model DIR or --random-100m");
  std::optional<LoadedModel> loaded;
  RandomModel rm;
  if (random) {
    const DType dtype = dtype_name == "f32"   ? DType::kF32
                        : dtype_name == "f16" ? DType::kF16
                                              : DType::kBF16;
    rm = random_100m(dtype);
    model::WeightLookup lookup{[&](const std::string& n) -> const TensorView* {
                                 auto it = rm.tensors.find(n);
                                 return it == rm.tensors.end() ? nullptr : &it->second;
                               },
                               [](const std::string&) { return std::string("memory"); }, "memory"};
    if (quantize != quant::QuantType::kNone) {
      cpu::ThreadPool quantize_pool(threads);
      auto q = model::quantize_weights(lookup, rm.spec, quantize, &quantize_pool, {});
      if (!q) {
        std::fprintf(stderr, "%s\n", q.error().what());
        return 1;
      }
      lookup = std::move(q.value());
    }
    built = model::Model::create(rm.spec, lookup);
    name = "random-100m (" + dtype_name +
           (quantize_name.empty() ? "" : ", " + std::string(quant::quant_info(quantize).name)) +
           ")";
  } else if (!model_dir.empty()) {
    LoadOptions options;
    options.quantize = quantize;
    auto l = load_model(model_dir, options);
    if (!l) {
      std::fprintf(stderr, "%s\n", l.error().what());
      return 1;
    }
    loaded.emplace(std::move(l.value()));
    built = std::move(loaded->model);
    name =
        model_dir +
        (quantize_name.empty() ? "" : " (" + std::string(quant::quant_info(quantize).name) + ")");
  }
  if (!built) {
    std::fprintf(stderr, "%s\n", built.error().what());
    return 1;
  }
  const model::Model& m = built.value();
  cpu::ThreadPool pool(threads);
  std::printf("model %s: %.1fM parameters; cpu %s, %u threads, kernels %s\n", name.c_str(),
              static_cast<double>(parameters(m.spec())) / 1e6,
              cpu::describe(cpu::cpu_features()).c_str(), pool.size(),
              cpu::kernel_path_name(cpu::resolve(path)));

  const int page_size = 16;
  double best_prefill = 0, best_decode = 0;
  for (int r = 0; r < repeats; ++r) {
    model::KvCache kv(m.kv_layout(page_size), (prompt_len + decode + page_size - 1) / page_size);
    model::StepBatch step;
    model::SequenceSlice seq{0, prompt_len, {}, false};
    while (static_cast<int>(seq.page_table.size()) < kv.pages_for(prompt_len + decode)) {
      seq.page_table.push_back(*kv.allocate_page());
    }
    for (int i = 0; i < prompt_len; ++i) {
      step.tokens.push_back((i * 7919 + 13) % m.spec().vocab_size);
      step.positions.push_back(i);
    }
    step.sequences.push_back(seq);
    std::vector<float> logits;
    auto start = std::chrono::steady_clock::now();
    if (auto ok = m.forward(step, kv, logits, pool, path); !ok) {
      std::fprintf(stderr, "%s\n", ok.error().what());
      return 1;
    }
    best_prefill = std::max(best_prefill, prompt_len / seconds_since(start));
    start = std::chrono::steady_clock::now();
    for (int k = 0; k < decode; ++k) {
      step.tokens = {(k * 31 + 5) % m.spec().vocab_size};
      step.positions = {prompt_len + k};
      step.sequences[0].token_count = 1;
      if (auto ok = m.forward(step, kv, logits, pool, path); !ok) {
        std::fprintf(stderr, "%s\n", ok.error().what());
        return 1;
      }
    }
    best_decode = std::max(best_decode, decode / seconds_since(start));
  }
  std::printf(
      "prefill %d tokens: %.1f tokens/s; decode %d tokens after it: %.1f tokens/s (best of %d)\n",
      prompt_len, best_prefill, decode, best_decode, repeats);
  return 0;
}
