// cuda_forward_bench's timed rows (cuda_forward_bench.hpp): prefill latency and TFLOP/s, decode
// step time against its floor, and with --attn-kernels and --profile the same decode steps per
// attention kernel and per kernel class (the top of cuda_forward_bench.cpp says what each
// measures).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/cuda_forward_bench.hpp"
#include "kernels/cuda/paged_attention.hpp"

namespace weft::bench {

int run_rows(const RowInputs& in, std::ostringstream& json) {
  model::CudaModel& gpu = *in.gpu;
  const model::ModelSpec& spec = *in.spec;
  const auto& kv_layout = gpu.kv_layout();
  const std::vector<int>& prefills = in.prefills;
  const std::vector<int>& batches = in.batches;
  const int context = in.context, repeats = in.repeats, profile_steps = in.profile_steps;
  const bool profile = in.profile, logits_to_host = in.logits_to_host;
  const int mixed = in.mixed;
  const std::vector<std::string>& attn_kernels = in.attn_kernels;
  const int page_size = in.page_size, prefill_pages = in.prefill_pages;
  const int decode_pages = in.decode_pages;
  const double weight_bytes = in.weight_bytes, quantized_params = in.quantized_params;
  const double bandwidth = in.bandwidth, floor_s = in.floor_s, gemm_peak = in.gemm_peak;
  const std::function<int()>& failed = in.failed;
  bool first_row = true;
  std::printf("%-8s %6s %8s %12s %12s %10s %9s %8s\n", "kind", "batch", "tokens", "ms/step",
              "tokens/s", "vs floor", "bound", "weights");
  const double params = quantized_params > 0 ? quantized_params : weight_bytes / 2;
  std::vector<float> logits;
  // A decode step as the engine runs it: launched, then sampled greedily on the device, only
  // the tokens coming back (--logits-to-host: forward() copying every row's logits instead).
  model::DeviceSamplingInput greedy;
  model::DeviceSamplingOutput sampled;
  auto decode_step = [&](const model::StepBatch& step) -> Result<void> {
    if (logits_to_host) return gpu.forward(step, logits);
    if (auto ok = gpu.launch(step); !ok) return ok;
    greedy.rows.resize(step.sequences.size());
    for (std::size_t r = 0; r < greedy.rows.size(); ++r)
      greedy.rows[r].row = static_cast<std::int32_t>(r);
    return gpu.sample(greedy, sampled);
  };
  auto fresh_tables = [&](int n, int pages_per_seq) {
    std::vector<std::vector<std::int32_t>> tables(n);
    for (auto& t : tables)
      while (static_cast<int>(t.size()) < pages_per_seq)
        t.push_back(*gpu.allocate_page());
    return tables;
  };
  auto release = [&](std::vector<std::vector<std::int32_t>>& tables) {
    for (auto& t : tables)
      for (auto p : t)
        gpu.release_page(p);
  };
  for (int len : prefills) {
    auto tables = fresh_tables(1, prefill_pages);
    model::StepBatch step;
    for (int i = 0; i < len; ++i) {
      step.tokens.push_back((i * 7919 + 13) % spec.vocab_size);
      step.positions.push_back(i);
    }
    step.sequences.push_back({0, len, tables[0], false});
    double best = 1e30;
    for (int r = 0; r < std::max(3, repeats / 4); ++r) {
      const double start = now_s();
      if (auto ok = gpu.forward(step, logits); !ok) {
        std::fprintf(stderr, "%s\n", ok.error().what());
        return failed();
      }
      best = std::min(best, now_s() - start);
    }
    // 2 FLOP per parameter per token, plus attention's 2 * 2 * len^2/2 * q_dim per layer.
    const double flops =
        2.0 * params * len + 2.0 * spec.num_layers * static_cast<double>(len) * len * spec.q_dim();
    const double tflops = flops / best / 1e12;
    const double of_peak = gemm_peak > 0 ? 100.0 * tflops / gemm_peak : 0.0;
    std::printf("%-8s %6d %8d %12.3f %12.0f %9.1fTF (%.0f%% of GEMM peak)\n", "prefill", 1, len,
                best * 1e3, len / best, tflops, of_peak);
    json << (first_row ? "" : ",") << "{\"kind\":\"prefill\",\"tokens\":" << len
         << ",\"ms\":" << best * 1e3 << ",\"tflops\":" << tflops
         << ",\"percent_of_gemm_peak\":" << of_peak;
    if (profile) {
      // One more prefill step with an event after each kernel class.
      gpu.set_kernel_profiling(true);
      gpu.take_kernel_profile();
      if (auto ok = gpu.forward(step, logits); !ok) {
        std::fprintf(stderr, "%s\n", ok.error().what());
        return failed();
      }
      gpu.set_kernel_profiling(false);
      const auto by_class = gpu.take_kernel_profile();
      double device_ms = 0;
      bool first = true;
      json << ",\"profile_ms\":{";
      std::printf("  profile, prefill %d, ms:", len);
      for (const auto& [what, ms] : by_class) {
        std::printf(" %s %.3f;", what.c_str(), ms);
        json << (first ? "" : ",") << "\"" << what << "\":" << ms;
        first = false;
        device_ms += ms;
      }
      std::printf(" sum %.3f\n", device_ms);
      json << "}";
    }
    json << "}";
    first_row = false;
    release(tables);
  }
  for (int batch : batches) {
    auto tables = fresh_tables(batch, decode_pages);
    // Fill the context: one prefill step per sequence (not timed). With int8/fp8 pages these
    // run the CUDA-core prefill attention (docs/cuda.md), so at long contexts and large batches
    // the fill takes longer than the timed steps: say so on stderr.
    const double fill_start = now_s();
    for (int s = 0; s < batch; ++s) {
      model::StepBatch step;
      for (int i = 0; i < context; ++i) {
        step.tokens.push_back((i * 31 + s) % spec.vocab_size);
        step.positions.push_back(i);
      }
      step.sequences.push_back({0, context, tables[s], false});
      if (auto ok = gpu.forward(step, logits); !ok) {
        std::fprintf(stderr, "%s\n", ok.error().what());
        return failed();
      }
    }
    std::fprintf(stderr, "[decode batch %d: context of %d tokens filled in %.1f s]\n", batch,
                 context, now_s() - fill_start);
    // Decode step k: one new token for each sequence.
    auto decode_batch = [&](int k) {
      model::StepBatch step;
      for (int s = 0; s < batch; ++s) {
        step.tokens.push_back((k * 17 + s) % spec.vocab_size);
        step.positions.push_back(context + k);
        step.sequences.push_back({s, 1, tables[s], false});
      }
      return step;
    };
    // Seconds per step of make(k) for k < repeats, the first two left out (they warm up
    // cuBLAS heuristics and caches); negative where a step failed (the error printed).
    auto time_steps = [&](auto make) {
      double total = 0;
      int timed = 0;
      for (int k = 0; k < repeats; ++k) {
        const model::StepBatch step = make(k);
        const double start = now_s();
        if (auto ok = decode_step(step); !ok) {
          std::fprintf(stderr, "%s\n", ok.error().what());
          return -1.0;
        }
        if (k >= 2) {
          total += now_s() - start;
          ++timed;
        }
      }
      return total / timed;
    };
    const double step_s = time_steps(decode_batch);
    if (step_s < 0) return failed();
    // The step's floor (see the top of the file). The context grows by one per timed step;
    // the first timed step's length is close enough at these repeat counts.
    // Every layer's K and V of a token, scales included for int8/fp8 pages.
    const double token_bytes = static_cast<double>(kv_layout.bytes_per_page()) / page_size;
    const double kv_bytes = static_cast<double>(batch) * context * token_bytes;
    const double memory_floor_s = (weight_bytes + kv_bytes) / bandwidth;
    const double step_flops = static_cast<double>(batch) *
                              (2.0 * params + 4.0 * spec.num_layers * context * spec.q_dim());
    const double compute_floor_s = gemm_peak > 0 ? step_flops / (gemm_peak * 1e12) : 0.0;
    const bool compute_bound = compute_floor_s > memory_floor_s;
    const double step_floor_s = std::max(memory_floor_s, compute_floor_s);
    std::printf("%-8s %6d %8d %12.3f %12.0f %9.0f%% %9s %7.0f%%\n", "decode", batch, context,
                step_s * 1e3, batch / step_s, step_floor_s / step_s * 100,
                compute_bound ? "compute" : "memory", floor_s / step_s * 100);
    json << ",{\"kind\":\"decode\",\"batch\":" << batch << ",\"context\":" << context
         << ",\"ms\":" << step_s * 1e3 << ",\"tokens_per_s\":" << batch / step_s
         << ",\"kv_bytes\":" << kv_bytes << ",\"memory_floor_ms\":" << memory_floor_s * 1e3
         << ",\"compute_floor_ms\":" << compute_floor_s * 1e3
         << ",\"floor_fraction\":" << step_floor_s / step_s
         << ",\"weights_floor_fraction\":" << floor_s / step_s;
    if (!attn_kernels.empty()) {
      // The same timed steps once per decode attention kernel (--attn-kernels; each captures
      // its own graphs, keyed by decode_split_count), then back to the chosen one.
      const cuda::DecodeAttentionKernel chosen = cuda::decode_attention_kernel();
      json << ",\"decode_by_attention_kernel\":{";
      bool first = true;
      for (const std::string& name : attn_kernels) {
        cuda::DecodeAttentionKernel kernel;
        if (name == "old") {
          kernel = cuda::DecodeAttentionKernel::kSplit;
        } else if (name == "new") {
          kernel = cuda::DecodeAttentionKernel::kPipelined;
        } else if (name == "stream") {
          kernel = cuda::DecodeAttentionKernel::kStream;
        } else {
          std::fprintf(stderr, "--attn-kernels: unknown kernel %s (old, new, stream)\n",
                       name.c_str());
          return failed();
        }
        cuda::set_decode_attention_kernel(kernel);
        const double s_k = time_steps(decode_batch);
        if (s_k < 0) return failed();
        std::printf("%-8s %6d %8d %12.3f %12.0f %9.0f%% %9s %7.0f%%  attention %s\n", "decode",
                    batch, context, s_k * 1e3, batch / s_k, step_floor_s / s_k * 100,
                    compute_bound ? "compute" : "memory", floor_s / s_k * 100, name.c_str());
        json << (first ? "" : ",") << "\"" << name << "\":{\"ms\":" << s_k * 1e3
             << ",\"floor_fraction\":" << step_floor_s / s_k << "}";
        first = false;
      }
      json << "}";
      cuda::set_decode_attention_kernel(chosen);
    }
    // profile_steps steps of make(k) as plain launches with an event after each kernel class:
    // prints the device ms per step by class and appends them to the JSON under `key`.
    auto class_profile = [&](auto make, const char* label, const char* key) -> bool {
      gpu.set_kernel_profiling(true);
      gpu.take_kernel_profile();
      double wall = 0;
      for (int k = repeats; k < repeats + profile_steps; ++k) {
        const model::StepBatch step = make(k);
        const double start = now_s();
        if (auto ok = decode_step(step); !ok) {
          std::fprintf(stderr, "%s\n", ok.error().what());
          return false;
        }
        wall += now_s() - start;
      }
      gpu.set_kernel_profiling(false);
      const auto by_class = gpu.take_kernel_profile();
      double device_ms = 0;
      json << ",\"" << key << "\":{";
      bool first = true;
      std::printf("  profile, %s batch %d, plain launches, ms per step:", label, batch);
      for (const auto& [what, ms] : by_class) {
        std::printf(" %s %.3f;", what.c_str(), ms / profile_steps);
        json << (first ? "" : ",") << "\"" << what << "\":" << ms / profile_steps;
        first = false;
        device_ms += ms / profile_steps;
      }
      std::printf(" sum %.3f; wall %.3f\n", device_ms, wall / profile_steps * 1e3);
      json << "},\"" << key << "_wall_ms\":" << wall / profile_steps * 1e3;
      return true;
    };
    if (mixed > 0) {
      // The same decode tokens with one more sequence's mixed-token prefill chunk (positions
      // 0 .. mixed - 1 of its own pages each time: the chunk's attention reads only itself).
      auto chunk = fresh_tables(1, (mixed + page_size - 1) / page_size);
      auto mixed_batch = [&](int k) {
        model::StepBatch step = decode_batch(k);
        const int begin = static_cast<int>(step.tokens.size());
        for (int i = 0; i < mixed; ++i) {
          step.tokens.push_back((i * 7919 + k) % spec.vocab_size);
          step.positions.push_back(i);
        }
        step.sequences.push_back({begin, mixed, chunk[0], false});
        return step;
      };
      const double m_s = time_steps(mixed_batch);
      if (m_s < 0) return failed();
      std::printf("%-8s %6d %8d %12.3f %12.0f   (+%d prefill tokens; decode step %+.3f ms)\n",
                  "mixed", batch, context, m_s * 1e3, (batch + mixed) / m_s, mixed,
                  (m_s - step_s) * 1e3);
      json << ",\"mixed\":{\"prefill_tokens\":" << mixed << ",\"ms\":" << m_s * 1e3 << "}";
      if (profile && !class_profile(mixed_batch, "mixed", "mixed_profile_ms_per_step")) {
        return failed();
      }
      release(chunk);
    }
    if (profile) {
      if (!class_profile(decode_batch, "decode", "profile_ms_per_step")) return failed();
      // Both decode attention kernels (paged_attention.hpp, DecodeAttentionKernel) on the same
      // steps, where the shape has both: ms per step and the KV read rate.
      if (cuda::decode_attention_applies_rope(spec.num_heads, kv_layout.num_kv_heads, spec.head_dim,
                                              kv_layout.dtype)) {
        const cuda::DecodeAttentionKernel chosen = cuda::decode_attention_kernel();
        std::printf("  decode attention, batch %d, KV %.2f GB per step:", batch, kv_bytes / 1e9);
        json << ",\"decode_attention_kernels\":{";
        for (auto kernel :
             {cuda::DecodeAttentionKernel::kSplit, cuda::DecodeAttentionKernel::kPipelined,
              cuda::DecodeAttentionKernel::kStream}) {
          cuda::set_decode_attention_kernel(kernel);
          gpu.set_kernel_profiling(true);
          gpu.take_kernel_profile();
          for (int k = repeats; k < repeats + profile_steps; ++k) {
            if (auto ok = decode_step(decode_batch(k)); !ok) {
              std::fprintf(stderr, "%s\n", ok.error().what());
              return failed();
            }
          }
          gpu.set_kernel_profiling(false);
          const auto classes = gpu.take_kernel_profile();
          const auto it = classes.find("decode attention");
          const double ms = it == classes.end() ? 0.0 : it->second / profile_steps;
          const double gbps = ms > 0 ? kv_bytes / (ms * 1e-3) / 1e9 : 0.0;
          const char* name = cuda::decode_attention_kernel_name(kernel);
          std::printf(" %s %.3f ms (%.0f GB/s, %.0f%% of copy bandwidth);", name, ms, gbps,
                      gbps * 1e9 / bandwidth * 100);
          json << (kernel == cuda::DecodeAttentionKernel::kSplit ? "" : ",") << "\"" << name
               << "\":{\"ms\":" << ms << ",\"gb_per_s\":" << gbps << "}";
        }
        std::printf("\n");
        json << "}";
        cuda::set_decode_attention_kernel(chosen);
      }
    }
    json << "}";
    release(tables);
  }
  return 0;
}

}  // namespace weft::bench
