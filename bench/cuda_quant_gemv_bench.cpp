// Batch-1 decode's weight products on an 8B-shaped model (Llama-3-8B: 32 layers, hidden 4096,
// fused qkv 6144, MLP 14336, vocabulary 128256), per weight format: bf16 through cuda::gemv,
// q8_b32 and q4_b32 through cuda::quant_gemv (docs/quantization.md). Each layer has its own
// weights, so every token streams all of them from memory as a decode step does. Reports the
// products' time per token, tokens/s if decode were only these products, and the ratio to
// the floor: weight bytes / device-to-device copy bandwidth (bytes read + written), measured
// in the same run.
//
//   cuda_quant_gemv_bench [--tokens 1] [--iters 20] [--layers 32]

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/quant_gemv.hpp"

namespace {

using weft::cuda::QuantGemvFormat;

struct Shape {
  int out, in;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double copy_bandwidth_bytes_per_s() {
  const std::size_t bytes = std::size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  const int reps = 10;
  const double start = now_s();
  for (int i = 0; i < reps; ++i)
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  const double dt = now_s() - start;
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * reps / dt;
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 1, iters = 20, layers = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") {
      tokens = std::atoi(argv[i + 1]);
    } else if (a == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (a == "--layers") {
      layers = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: cuda_quant_gemv_bench [--tokens N] [--iters N] [--layers N]\n");
      return 2;
    }
  }
  if (tokens < 1 || tokens > weft::cuda::kQuantGemvMaxTokens) {
    std::fprintf(stderr, "--tokens must be in [1, %d]\n", weft::cuda::kQuantGemvMaxTokens);
    return 2;
  }
  int devices = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no GPU visible (%s)\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "no devices");
    return 1;
  }
  const std::vector<Shape> per_layer = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  const Shape head{128256, 4096};
  const double bandwidth = copy_bandwidth_bytes_per_s();
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s; copy bandwidth %.0f GB/s (read+write); %d layers + lm head, %d token(s)\n",
              prop.name, bandwidth / 1e9, layers, tokens);

  void *x = nullptr, *y = nullptr;
  check(cudaMalloc(&x, sizeof(std::uint16_t) * tokens * 14336), "x");
  check(cudaMemset(x, 0x3c, sizeof(std::uint16_t) * tokens * 14336), "x");
  check(cudaMalloc(&y, sizeof(float) * tokens * head.out), "y");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");

  double bf16_tps = 0;
  std::printf("%-8s %10s %12s %10s %10s %9s %8s\n", "format", "weights GB", "ms / token",
              "tokens/s", "floor ms", "vs floor", "vs bf16");
  for (const char* name : {"bf16", "q8_b32", "q4_b32"}) {
    const std::string f = name;
    auto bytes_of = [&](Shape s) {
      if (f == "bf16") return std::size_t{2} * s.out * s.in;
      const auto q = f == "q8_b32" ? QuantGemvFormat::kQ8B32 : QuantGemvFormat::kQ4B32;
      return weft::cuda::quant_gemv_row_bytes(q, s.in) * s.out;
    };
    struct Matrix {
      Shape shape;
      void* data;
    };
    std::vector<Matrix> matrices;
    std::size_t total = 0;
    for (int l = 0; l < layers; ++l) {
      for (const Shape s : per_layer)
        matrices.push_back({s, nullptr});
    }
    matrices.push_back({head, nullptr});
    for (auto& m : matrices) {
      const std::size_t n = bytes_of(m.shape);
      check(cudaMalloc(&m.data, n), "weights");
      // 0x3c3c: fp16 scale and min of about 1, codes 12 / 60; bf16 weights of about 0.01.
      check(cudaMemset(m.data, 0x3c, n), "weights");
      total += n;
    }
    auto run = [&] {
      for (const auto& m : matrices) {
        if (f == "bf16") {
          weft::cuda::gemv(x, tokens, m.data, m.shape.out, m.shape.in, static_cast<float*>(y),
                           m.shape.out, weft::cuda::Precision::kBF16, stream);
        } else {
          weft::cuda::quant_gemv(x, tokens, m.data,
                                 f == "q8_b32" ? QuantGemvFormat::kQ8B32 : QuantGemvFormat::kQ4B32,
                                 m.shape.out, m.shape.in, static_cast<float*>(y), m.shape.out,
                                 weft::cuda::Precision::kBF16, stream);
        }
      }
    };
    run();
    check(cudaStreamSynchronize(stream), "warm-up");
    check(cudaGetLastError(), "launch");
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream);
    for (int i = 0; i < iters; ++i)
      run();
    cudaEventRecord(stop, stream);
    check(cudaEventSynchronize(stop), "timed runs");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const double per_token_ms = ms / iters;
    const double tps = tokens * 1e3 / per_token_ms;
    const double floor_ms = total / bandwidth * 1e3;
    if (f == "bf16") bf16_tps = tps;
    std::printf("%-8s %10.2f %12.3f %10.1f %10.3f %8.0f%% %7.2fx\n", name, total / 1e9,
                per_token_ms, tps, floor_ms, floor_ms / per_token_ms * 100, tps / bf16_tps);
    for (auto& m : matrices)
      cudaFree(m.data);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  cudaFree(x);
  cudaFree(y);
  return 0;
}
