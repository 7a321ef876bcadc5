#include "runtime/model/cuda/step_prefetch.hpp"

#include <algorithm>
#include <cstddef>
#include <initializer_list>

#include "kernels/cuda/l2_prefetch.hpp"

namespace weft::model {

void StepPrefetch::fork() {
  cudaEventRecord(fork_, stream_);
  cudaStreamWaitEvent(side_, fork_, 0);
  forked_ = true;
}

void StepPrefetch::range(Range which, const void* w, std::size_t elements, bool beside_reduce) {
  std::size_t cap = switches_.cap[which];
  if (beside_reduce && tensor_parallel_ && switches_.tp_cap > 0 && cap > 0) {
    cap = switches_.tp_cap;  // WEFT_L2_PREFETCH_MB=0 still turns it off
  }
  if (!on_ || w == nullptr || cap == 0) return;
  fork();
  cuda::l2_prefetch(w, std::min(elements * 2, cap), side_);  // 16-bit
}

void StepPrefetch::matrix(Range which, const void* w16, const void* wq, std::size_t rows,
                          std::size_t cols, bool beside_reduce) {
  if (!quant_ || wq == nullptr) return range(which, w16, rows * cols, beside_reduce);
  if (switches_.quant_cap == 0) return;  // PrefetchSwitches: not for quantized matrices
  const std::size_t bytes = cuda::quant_matrix_layout(*quant_, rows, cols).code_bytes();
  range(which, wq, std::min(bytes, switches_.quant_cap) / 2, beside_reduce);
}

void StepPrefetch::gate_up_ahead(const void* wq, std::size_t rows, std::size_t cols) {
  if (!on_ || switches_.quant_ahead == 0 || !quant_ || wq == nullptr) return;
  const cuda::QuantMatrixLayout lay = cuda::quant_matrix_layout(*quant_, rows, cols);
  const std::size_t code_row = lay.row_code_words * 4, head_row = lay.row_blocks * 4;
  const std::size_t width = lay.rows / 2;
  const std::size_t n = std::min(width, switches_.quant_ahead / (2 * (code_row + head_row)));
  if (n == 0) return;
  fork();
  const auto* base = static_cast<const std::byte*>(wq);
  for (const std::size_t first : {std::size_t{0}, width}) {
    cuda::l2_prefetch(base + first * code_row, n * code_row, side_);
    cuda::l2_prefetch(base + lay.header_offset() + first * head_row, n * head_row, side_);
  }
}

void StepPrefetch::join() {
  if (!forked_) return;
  cudaEventRecord(join_, side_);
  cudaStreamWaitEvent(stream_, join_, 0);
}

}  // namespace weft::model
