// cuda_forward_bench's random model (cuda_forward_bench.hpp): Llama-shaped, built in memory.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_forward_bench.hpp"

namespace weft::bench {

RandomModel random_llama(const std::string& shape, int layers) {
  RandomModel m;
  auto& s = m.spec;
  s.architecture = "random-llama-" + shape;
  if (shape == "70b") {  // Llama-3-70B's widths
    s.vocab_size = 128256, s.hidden_size = 8192, s.intermediate_size = 28672, s.num_layers = 80;
    s.num_heads = 64, s.num_kv_heads = 8, s.head_dim = 128;
  } else if (shape == "8b") {  // Llama-3-8B
    s.vocab_size = 128256, s.hidden_size = 4096, s.intermediate_size = 14336, s.num_layers = 32;
    s.num_heads = 32, s.num_kv_heads = 8, s.head_dim = 128;
  } else if (shape == "1b") {  // Llama-3.2-1B
    s.vocab_size = 128256, s.hidden_size = 2048, s.intermediate_size = 8192, s.num_layers = 16;
    s.num_heads = 32, s.num_kv_heads = 8, s.head_dim = 64;
  } else {
    s.vocab_size = 8192, s.hidden_size = 384, s.intermediate_size = 896, s.num_layers = 8;
    s.num_heads = 6, s.num_kv_heads = 2, s.head_dim = 64;
  }
  if (layers > 0) {
    s.num_layers = layers;
    s.architecture.append("-").append(std::to_string(layers)).append("layers");
  }
  s.rope.theta = 500000.0;
  s.tied_embeddings = shape != "8b" && shape != "70b";
  auto& n = s.tensors;
  n = {"embed",
       "norm",
       "lm_head",
       "l{layer}.attn_norm",
       "l{layer}.mlp_norm",
       "l{layer}.q",
       "l{layer}.k",
       "l{layer}.v",
       "",
       "l{layer}.o",
       "l{layer}.gate",
       "l{layer}.up",
       "",
       "l{layer}.down"};
  // Each tensor's values come in chunks from an LCG seeded by (tensor, chunk), drawn on every
  // core: the 8b and 70b shapes have billions of values.
  std::uint64_t tensor_index = 0;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape_, bool ones) {
    std::int64_t count = 1;
    for (auto d : shape_)
      count *= d;
    TensorView t;
    t.shape = std::move(shape_);
    if (t.shape.size() == 2) {
      auto bytes = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(count));
      const std::size_t chunk = std::size_t{1} << 22;
      const std::size_t chunks = (bytes->size() + chunk - 1) / chunk;
      const std::uint64_t seed = 0x9E3779B97F4A7C15ull * ++tensor_index;
      std::atomic<std::size_t> next{0};
      auto fill = [&] {
        for (std::size_t c = next++; c < chunks; c = next++) {
          std::uint64_t state = seed ^ (c * 0xD1B54A32D192ED03ull);
          const std::size_t end = std::min(bytes->size(), (c + 1) * chunk);
          for (std::size_t i = c * chunk; i < end; ++i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            // bf16 of a value in about [-0.03, 0.03]: exponent 2^-6..2^-8, random sign/mantissa.
            const auto r = static_cast<std::uint16_t>(state >> 48);
            (*bytes)[i] = static_cast<std::uint16_t>((r & 0x807F) | ((0x79 + ((r >> 7) & 1)) << 7));
          }
        }
      };
      std::vector<std::thread> pool;
      for (unsigned k = 1; k < std::min<std::size_t>(threads, chunks); ++k)
        pool.emplace_back(fill);
      fill();
      for (auto& th : pool)
        th.join();
      t.dtype = DType::kBF16;
      t.data = reinterpret_cast<const std::byte*>(bytes->data());
      t.owner = bytes;
    } else {
      auto floats =
          std::make_shared<std::vector<float>>(static_cast<std::size_t>(count), ones ? 1.0f : 0.0f);
      t.dtype = DType::kF32;
      t.data = reinterpret_cast<const std::byte*>(floats->data());
      t.owner = floats;
    }
    m.tensors[name] = std::move(t);
  };
  const std::int64_t H = s.hidden_size, I = s.intermediate_size;
  add("embed", {s.vocab_size, H}, false);
  if (!s.tied_embeddings) add("lm_head", {s.vocab_size, H}, false);
  add("norm", {H}, true);
  for (int l = 0; l < s.num_layers; ++l) {
    const std::string p = std::string("l").append(std::to_string(l)).append(".");
    add(p + "attn_norm", {H}, true);
    add(p + "mlp_norm", {H}, true);
    add(p + "q", {s.q_dim(), H}, false);
    add(p + "k", {s.kv_dim(), H}, false);
    add(p + "v", {s.kv_dim(), H}, false);
    add(p + "o", {H, s.q_dim()}, false);
    add(p + "gate", {I, H}, false);
    add(p + "up", {I, H}, false);
    add(p + "down", {H, I}, false);
  }
  return m;
}

}  // namespace weft::bench
