#pragma once
// The L2 prefetches of one step's weights (prefetch_switches.hpp says which and how much): each
// forks the step's side stream from the step's stream where the step asks for it, and join()
// brings the side stream back before what must not run beside it (a pipeline stage's hand-off,
// the end of the step). Used by CudaModel::State::enqueue_step (cuda_model_enqueue.cpp).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>

#include "kernels/cuda/quant_layout.hpp"
#include "runtime/model/cuda/prefetch_switches.hpp"

namespace weft::model {

class StepPrefetch {
 public:
  using Range = PrefetchSwitches::Range;

  // `on`: the step prefetches at all (a side stream exists and the step is small enough);
  // `tensor_parallel`: ranges beside an all-reduce take the tensor-parallel cap; `quant`: the
  // format of the quantized matrices the step reads as such (nullopt: it reads 16-bit rows).
  StepPrefetch(cudaStream_t stream, cudaStream_t side, cudaEvent_t fork, cudaEvent_t join, bool on,
               bool tensor_parallel, std::optional<cuda::QuantGemvFormat> quant)
      : switches_(PrefetchSwitches::get()),
        stream_(stream),
        side_(side),
        fork_(fork),
        join_(join),
        on_(on),
        tensor_parallel_(tensor_parallel),
        quant_(quant) {}

  // The first bytes of `elements` 16-bit elements at `w`, up to the range's cap (`beside_reduce`:
  // the range runs beside a tensor-parallel all-reduce).
  void range(Range which, const void* w, std::size_t elements, bool beside_reduce = false);
  // A [rows, cols] matrix as the step reads it: its quantized codes when `wq` is set and the
  // step reads quantized matrices (up to the quantized cap), else its 16-bit rows `w16`.
  void matrix(Range which, const void* w16, const void* wq, std::size_t rows, std::size_t cols,
              bool beside_reduce = false);
  // The first rows of a quantized gated gate_up `wq` ([rows, cols], gate rows then up rows):
  // gate rows [0, n) and up rows [rows / 2, rows / 2 + n), codes and block headers, about the
  // ahead cap's bytes (PrefetchSwitches::quant_ahead).
  void gate_up_ahead(const void* wq, std::size_t rows, std::size_t cols);
  // Waits on the step's stream for everything forked so far.
  void join();

 private:
  void fork();

  const PrefetchSwitches& switches_;
  cudaStream_t stream_, side_;
  cudaEvent_t fork_, join_;
  bool on_, tensor_parallel_;
  std::optional<cuda::QuantGemvFormat> quant_;
  bool forked_ = false;
};

}  // namespace weft::model
