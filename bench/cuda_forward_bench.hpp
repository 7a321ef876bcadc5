#pragma once
// cuda_forward_bench's parts (the top of cuda_forward_bench.cpp says what it measures): main,
// its options, the floors' divisors (copy bandwidth, GEMM peak) and the report are in
// cuda_forward_bench.cpp, the random Llama-shaped model in cuda_forward_bench_model.cpp, and the
// timed prefill and decode rows in cuda_forward_bench_rows.cpp.

#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/model/cuda/cuda_model.hpp"
#include "runtime/model/model_spec.hpp"
#include "weft/tensor.hpp"

namespace weft::bench {

struct RandomModel {
  model::ModelSpec spec;
  std::map<std::string, TensorView> tensors;
};

// Llama-shaped random model; weights are bf16 from a cheap hash (the values do not matter for
// speed, only that they are finite and small).
RandomModel random_llama(const std::string& shape, int layers);

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The timed rows' inputs: the model on the GPU and its spec, main's options, the KV pool's
// sizing, the floors' divisors measured before the rows, and what a failure returns (main's
// failed(): with --tensor-parallel it ends every rank).
struct RowInputs {
  model::CudaModel* gpu = nullptr;
  const model::ModelSpec* spec = nullptr;
  std::vector<int> prefills, batches;
  int context = 0, repeats = 0, profile_steps = 0;
  int mixed = 0;  // --mixed: the prefill chunk's tokens in each "mixed" step (0: no such rows)
  bool profile = false, logits_to_host = false;
  std::vector<std::string> attn_kernels;
  int page_size = 0, prefill_pages = 0, decode_pages = 0;
  double weight_bytes = 0, quantized_params = 0, bandwidth = 0, floor_s = 0, gemm_peak = 0;
  std::function<int()> failed;
};

// Times the prefill rows, then the decode rows (with the steps of --attn-kernels and
// --profile), printing each and appending it to `json`'s "rows" array; returns 0, or failed()'s
// exit code.
int run_rows(const RowInputs& in, std::ostringstream& json);

}  // namespace weft::bench
