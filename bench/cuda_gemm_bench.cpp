// The decode products of a Llama-3-8B layer at few tokens: cuBLAS's default choice
// (cublasGemmEx, what Blas::linear calls), every algorithm cuBLASLt's heuristic offers (with
// split-K variants), and Weft's gemv kernel. For each: time per product, the weight bandwidth
// it reaches, and whether token 0's outputs are bitwise the same when the product has more
// tokens (batch invariance of a decode row). Runs on the device machine; figures go to
// docs/cuda.md with the command.
//
//   cuda_gemm_bench [--tokens 1,2,4,8,64,256] [--algos 24] [--iters 40]

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/gemv.hpp"

namespace {

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

struct Shape {
  const char* name;
  int out, in;
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',')
      ++p;
    if (*p == ',') ++p;
  }
  return v;
}

// Random bf16 bits in about [-0.03, 0.03] (what transformers' initialisation gives).
void fill_random(std::vector<std::uint16_t>& h, std::uint64_t seed) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : h) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float f = (static_cast<float>(s >> 40) / 16777216.0f - 0.5f) * 0.06f;
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    v = static_cast<std::uint16_t>(b >> 16);
  }
}

struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 32u << 20;
};

struct Problem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Problem(int out, int in, int tokens) {
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n));
    cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, in, out, in);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, in, tokens, in);
    cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, out, tokens, out);
  }
  ~Problem() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
  }
};

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, splitk = 0, red = 0, stages = 0, swz = 0;
  std::size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                       sizeof(splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                       sizeof(red), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                       sizeof(stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz),
                                       &w);
  char buf[128];
  std::snprintf(buf, sizeof(buf), "id=%d tile=%d splitk=%d red=%d stages=%d swz=%d", id, tile,
                splitk, red, stages, swz);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> tokens_list = {1, 2, 4, 8, 64, 256};
  int max_algos = 24, iters = 40;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc)
      tokens_list = parse_list(argv[++i]);
    else if (a == "--algos" && i + 1 < argc)
      max_algos = std::atoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: cuda_gemm_bench [--tokens 1,2,4,8,64,256] [--algos N] [--iters N]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cuda_gemm_bench: no CUDA device\n");
    return 1;
  }
  const Shape shapes[] = {{"qkv", 6144, 4096},
                          {"o", 4096, 4096},
                          {"gate_up", 28672, 4096},
                          {"down", 4096, 14336},
                          {"lm_head", 128256, 4096}};
  const int max_tokens = *std::max_element(tokens_list.begin(), tokens_list.end());
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cublasHandle_t blas;
  cublasCreate(&blas);
  cublasSetStream(blas, stream);
  Lt lt;
  cublasLtCreate(&lt.handle);
  CHECK_CUDA(cudaMalloc(&lt.workspace, lt.workspace_bytes));
  cublasSetWorkspace(blas, lt.workspace, lt.workspace_bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);

  for (const Shape& s : shapes) {
    const std::size_t wbytes = static_cast<std::size_t>(s.out) * s.in * 2;
    // Enough copies that they do not fit the 50 MB L2 together: each product streams its
    // weights from memory, as in a real step.
    const int copies = static_cast<int>(std::max<std::size_t>(1, (400u << 20) / wbytes + 1));
    std::vector<std::uint16_t> hw(static_cast<std::size_t>(s.out) * s.in);
    fill_random(hw, 7);
    std::vector<void*> w(copies);
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(cudaMalloc(&w[c], wbytes));
      CHECK_CUDA(cudaMemcpy(w[c], hw.data(), wbytes, cudaMemcpyHostToDevice));
    }
    std::vector<std::uint16_t> hx(static_cast<std::size_t>(max_tokens) * s.in);
    fill_random(hx, 11);
    void* x;
    float* y;
    CHECK_CUDA(cudaMalloc(&x, hx.size() * 2));
    CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(
        cudaMalloc(reinterpret_cast<void**>(&y), static_cast<std::size_t>(max_tokens) * s.out * 4));
    std::vector<float> row0_ref(s.out), row0(s.out);
    std::printf("\n== %s: out %d, in %d, %.1f MB of weights, %d copies\n", s.name, s.out, s.in,
                wbytes / 1e6, copies);

    auto time_it = [&](auto&& launch) {
      for (int i = 0; i < 3; ++i)
        launch(w[i % copies]);
      cudaEventRecord(e0, stream);
      for (int i = 0; i < iters; ++i)
        launch(w[i % copies]);
      cudaEventRecord(e1, stream);
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      return ms * 1000.0f / iters;  // us
    };
    auto same_row0 = [&](const std::vector<float>& ref) {
      CHECK_CUDA(cudaMemcpy(row0.data(), y, s.out * 4, cudaMemcpyDeviceToHost));
      return std::memcmp(row0.data(), ref.data(), s.out * 4) == 0;
    };
    const float alpha = 1.0f, beta = 0.0f;

    // 1. cublasGemmEx, default algorithm (Blas::linear).
    std::printf("%-44s", "cublasGemmEx default");
    for (int n : tokens_list) {
      auto launch = [&](void* wc) {
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.out, n, s.in, &alpha, wc, CUDA_R_16BF, s.in,
                     x, CUDA_R_16BF, s.in, &beta, y, CUDA_R_32F, s.out, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
      };
      const float us = time_it(launch);
      launch(w[0]);
      bool same = true;
      if (n == tokens_list.front()) {
        CHECK_CUDA(cudaMemcpy(row0_ref.data(), y, s.out * 4, cudaMemcpyDeviceToHost));
      } else {
        same = same_row0(row0_ref);
      }
      std::printf(" | n=%d %7.1f us %5.0f GB/s%s", n, us, wbytes / us / 1e3, same ? "" : " DIFF");
    }
    std::printf("\n");
    std::vector<float> cublas_row0 = row0_ref;

    // 2. weft gemv (tokens <= 8).
    std::printf("%-44s", "weft gemv");
    for (int n : tokens_list) {
      if (n > weft::cuda::kGemvMaxTokens) continue;
      auto launch = [&](void* wc) {
        weft::cuda::gemv(x, n, wc, s.out, s.in, y, s.out, weft::cuda::Precision::kBF16, stream);
      };
      const float us = time_it(launch);
      launch(w[0]);
      const bool same = same_row0(cublas_row0);
      std::printf(" | n=%d %7.1f us %5.0f GB/s%s", n, us, wbytes / us / 1e3,
                  same ? " =cublas" : "");
    }
    std::printf("\n");

    // 3. cuBLASLt heuristic at the first token count; each algorithm (and split-K variants)
    // then run at every token count where cublasLtMatmulAlgoCheck accepts it.
    const int n0 = tokens_list.front();
    Problem p0(s.out, s.in, n0);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &lt.workspace_bytes, sizeof(lt.workspace_bytes));
    std::vector<cublasLtMatmulHeuristicResult_t> results(max_algos);
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(lt.handle, p0.desc, p0.a, p0.b, p0.c, p0.c, pref, max_algos,
                                   results.data(), &found);
    std::vector<cublasLtMatmulAlgo_t> algos;
    for (int i = 0; i < found; ++i) {
      algos.push_back(results[i].algo);
      int cap_split = 0;
      std::size_t wr = 0;
      cublasLtMatmulAlgoCapGetAttribute(&results[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT,
                                        &cap_split, sizeof(cap_split), &wr);
      if (!cap_split) continue;
      for (int k : {2, 4, 8, 16}) {
        cublasLtMatmulAlgo_t a = results[i].algo;
        const int red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &k, sizeof(k));
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                             sizeof(red));
        algos.push_back(a);
      }
    }
    for (const auto& algo : algos) {
      std::string line;
      bool any = false;
      std::vector<float> ref;
      for (int n : tokens_list) {
        Problem p(s.out, s.in, n);
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(lt.handle, p.desc, p.a, p.b, p.c, p.c, &algo, &check) !=
                CUBLAS_STATUS_SUCCESS ||
            check.workspaceSize > lt.workspace_bytes) {
          line += " | n=" + std::to_string(n) + " (not valid)";
          continue;
        }
        bool ok = true;
        auto launch = [&](void* wc) {
          ok = cublasLtMatmul(lt.handle, p.desc, &alpha, wc, p.a, x, p.b, &beta, y, p.c, y, p.c,
                              &algo, lt.workspace, lt.workspace_bytes,
                              stream) == CUBLAS_STATUS_SUCCESS &&
               ok;
        };
        const float us = time_it(launch);
        launch(w[0]);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        std::vector<float> r(s.out);
        CHECK_CUDA(cudaMemcpy(r.data(), y, s.out * 4, cudaMemcpyDeviceToHost));
        const bool same_self = ref.empty() || std::memcmp(r.data(), ref.data(), s.out * 4) == 0;
        if (ref.empty()) ref = r;
        char buf[96];
        std::snprintf(buf, sizeof(buf), " | n=%d %7.1f us %5.0f GB/s%s%s", n, us, wbytes / us / 1e3,
                      same_self ? "" : " DIFF", ok ? "" : " FAILED");
        line += buf;
        any = true;
      }
      if (any) std::printf("%-44s%s\n", describe(algo).c_str(), line.c_str());
    }
    cublasLtMatmulPreferenceDestroy(pref);
    for (void* p : w)
      cudaFree(p);
    cudaFree(x);
    cudaFree(y);
  }
  return 0;
}
