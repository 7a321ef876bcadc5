#pragma once
// Host weights to one GPU, one tensor at a time, as CudaEncoder and CudaSeq2Seq upload theirs
// (CudaModel streams its matrices through pinned chunks instead, and shares upload_floats).
// Every copy goes through the model's stream and is waited for, so the host memory may be
// freed on return and the device memory is ready for any later work: a plain cudaMemcpy from
// pageable memory may return before its DMA lands, and a non-blocking stream would not wait
// for it. Host code only; internal to runtime/model/cuda.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cuda/precision.hpp"
#include "runtime/model/cuda/device_buffer.hpp"
#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft::model::cuda_detail {

// What a model's uploads share: its stream, the precision its 16-bit weights take, the
// staging buffer raw weight bytes pass through on their way to that precision, and the count
// of device bytes its weights hold (increased by every allocation here).
struct WeightUpload {
  cudaStream_t stream = nullptr;
  cuda::Precision precision = cuda::Precision::kBF16;
  DeviceBuffer* staging = nullptr;
  std::size_t* weight_bytes = nullptr;
};

// Copies `count` elements of `src` (f32/f16/bf16 on the host) into dst at element `offset` of
// a buffer of `total` elements in up.precision (allocated on first use).
Result<void> upload16(const WeightUpload& up, const void* src, DType dtype, std::size_t count,
                      DeviceBuffer& dst, std::size_t offset, std::size_t total);

// w's rows into rows [row_offset, row_offset + w.rows) of a [total_rows, w.cols] matrix in
// up.precision (so q/k/v or gate/up fuse into one product), through upload16.
Result<void> upload_matrix(const WeightUpload& up, const cpu::WeightMatrix& w, DeviceBuffer& dst,
                           std::size_t row_offset, std::size_t total_rows);

// The fp32 vector `v` (a norm, bias or table) into dst, its bytes added to weight_bytes;
// nothing when `v` is empty.
Result<void> upload_floats(cudaStream_t stream, std::size_t& weight_bytes,
                           const std::vector<float>& v, DeviceBuffer& dst);

}  // namespace weft::model::cuda_detail
