// The weight uploads CudaEncoder, CudaSeq2Seq and CudaModel share (weight_upload.hpp).

#include "runtime/model/cuda/weight_upload.hpp"

#include <string>

#include "kernels/cuda/convert.hpp"
#include "runtime/model/cuda/cuda_common.hpp"

namespace weft::model::cuda_detail {

Result<void> upload16(const WeightUpload& up, const void* src, DType dtype, std::size_t count,
                      DeviceBuffer& dst, std::size_t offset, std::size_t total) {
  if (dst.get() == nullptr) {
    if (auto err = dst.reserve(total * cuda::kHalfBytes); err != cudaSuccess) {
      return cuda_error(err, "allocating a weight matrix of " +
                                 std::to_string(total * cuda::kHalfBytes) + " bytes");
    }
    *up.weight_bytes += total * cuda::kHalfBytes;
  }
  const std::size_t raw = count * dtype_size(dtype);
  if (auto err = up.staging->reserve(raw); err != cudaSuccess) {
    return cuda_error(err, "allocating the upload staging buffer");
  }
  if (auto err = cudaMemcpyAsync(up.staging->get(), src, raw, cudaMemcpyHostToDevice, up.stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading weights");
  }
  cuda::convert_to_precision(up.staging->get(), source_type(dtype),
                             dst.as<std::byte>() + offset * cuda::kHalfBytes, up.precision, count,
                             up.stream);
  // The staging buffer is reused by the next upload.
  if (auto err = cudaStreamSynchronize(up.stream); err != cudaSuccess) {
    return cuda_error(err, "converting weights");
  }
  return {};
}

Result<void> upload_matrix(const WeightUpload& up, const cpu::WeightMatrix& w, DeviceBuffer& dst,
                           std::size_t row_offset, std::size_t total_rows) {
  return upload16(up, w.data, w.dtype, w.rows * w.cols, dst, row_offset * w.cols,
                  total_rows * w.cols);
}

Result<void> upload_floats(cudaStream_t stream, std::size_t& weight_bytes,
                           const std::vector<float>& v, DeviceBuffer& dst) {
  if (v.empty()) return {};
  const std::size_t bytes = v.size() * sizeof(float);
  if (auto err = dst.reserve(bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating a norm, bias or table vector");
  }
  weight_bytes += bytes;
  if (auto err = cudaMemcpyAsync(dst.get(), v.data(), bytes, cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading a norm, bias or table vector");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "uploading a norm, bias or table vector");
  }
  return {};
}

}  // namespace weft::model::cuda_detail
