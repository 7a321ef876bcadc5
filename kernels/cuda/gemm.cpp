#include "kernels/cuda/gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cuda/gemv.hpp"

namespace weft::cuda {

namespace {
// cuBLAS's recommendation for Hopper; a workspace set by the caller is what lets products be
// captured into CUDA graphs without cuBLAS allocating during the capture.
constexpr std::size_t kWorkspaceBytes = 32u << 20;
}  // namespace

Blas::Blas() {
  const cublasStatus_t status = cublasCreate(&handle_);
  if (status != CUBLAS_STATUS_SUCCESS) {
    handle_ = nullptr;
    error_ = std::string("cublasCreate failed: ") + cublasGetStatusString(status);
    return;
  }
  if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess) {
    cudaGetLastError();
    workspace_ = nullptr;
    error_ = "cuBLAS workspace: out of device memory";
    return;
  }
  cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes);
}

void Blas::set_gemv_max_tokens(int tokens) noexcept {
  gemv_max_tokens_ = std::clamp(tokens, 0, kGemvMaxTokens);
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
}

bool Blas::linear(const void* x, int tokens, const void* w, int out_features, int in_features,
                  float* y, int ldy, Precision precision, cudaStream_t stream) {
  if (handle_ == nullptr) return false;
  if (tokens == 0) return true;
  if (tokens <= gemv_max_tokens_ && gemv_supported(x, tokens, w, in_features)) {
    gemv(x, tokens, w, out_features, in_features, y, ldy, precision, stream);
    return true;  // a launch failure shows in the caller's cudaGetLastError
  }
  if (cublasSetStream(handle_, stream) != CUBLAS_STATUS_SUCCESS) return false;
  // Row-major y^T = w x^T is column-major y = op(w) x: w as stored is column-major [in, out],
  // transposed gives [out, in]; x is column-major [in, tokens].
  const cudaDataType_t type = precision == Precision::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out_features, tokens, in_features, &alpha,
                      w, type, in_features, x, type, in_features, &beta, y, CUDA_R_32F, ldy,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
}

bool Blas::linear16(const void* x, int tokens, const void* w, int out_features, int in_features,
                    void* y, int ldy, Precision precision, cudaStream_t stream) {
  if (handle_ == nullptr) return false;
  if (tokens == 0) return true;
  if (cublasSetStream(handle_, stream) != CUBLAS_STATUS_SUCCESS) return false;
  const cudaDataType_t type = precision == Precision::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out_features, tokens, in_features, &alpha,
                      w, type, in_features, x, type, in_features, &beta, y, type, ldy,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace weft::cuda
