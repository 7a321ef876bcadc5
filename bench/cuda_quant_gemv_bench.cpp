// The dequantize-fused products (kernels/cuda/quant_gemv.hpp) per weight format on 8B shapes
// (Llama-3-8B: 32 layers, hidden 4096, fused qkv 6144, MLP 14336, vocabulary 128256), against
// the device-to-device copy bandwidth measured in the same run. Two tables:
//
// 1. Per format, kernel and matrix shape (out x in: 4096x4096 o, 1024x4096 k or v alone,
//    6144x4096 fused qkv, 14336x4096, 28672x4096 fused gate_up, 4096x14336 down, 128256x4096
//    head): microseconds per
//    product and the effective bandwidth, the quantized matrix's bytes (codes and headers)
//    divided by that time, with its percentage of the copy bandwidth. Enough copies of the
//    matrix rotate that none is read from L2.
// 1b. With the mma, stream and dp4a kernels: the fused gate_up product with its SiLU
//    (quant_gemv_gated) against the same kernel's product then the activation kernel
//    (28672x4096).
// 2. Batch-1 decode's products (every layer's qkv, o, gate_up and down, then the lm head; each
//    layer its own weights; since 2026-11-26 night, gate_up with its SiLU as the model runs it:
//    fused for the mma, stream and dp4a kernels, the activation kernel after it otherwise): time
//    per token, tokens/s if decode were only these products, the floor (weight bytes / copy
//    bandwidth) and the ratio to it and to bf16 (cuda::gemv).
//
// Each GPU-layout format runs through each kernel of --kernels (quant_gemv.hpp's
// QuantGemvKernel: "lanes", the CUDA-core kernel, "mma", the tensor-core one, "stream", the
// tensor-core one with persistent blocks streaming the weights, "dp4a", q4 with x rounded to
// 8-bit integers, "auto", the per-call choice),
// rows named "q4_b32 lanes", "q4_b32 mma", ... A kernel that does not have the format runs
// what quant_gemv_resolve gives (stream: lanes). "blocks q4_b32/q8_b32" are the first kernels
// (quant_gemv_blocks.hpp, reading the CPU layout) for comparison. The copy bandwidth counts
// bytes read + written.
//
// The timed calls run as one CUDA graph (as the model's decode steps do; before 2026-11-25
// night they were launched one by one, which --no-graphs still does), so host launch costs do
// not hide kernels of a few microseconds.
//
//   cuda_quant_gemv_bench [--tokens 1] [--iters 20] [--layers 32] [--formats all|q4_b32,...]
//                         [--kernels lanes,mma,stream,dp4a,auto] [--no-reference] [--no-graphs]

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/quant_gemv.hpp"
#include "kernels/cuda/quant_gemv_blocks.hpp"

namespace {

using weft::cuda::QuantGemvFormat;

constexpr const char* kNames[] = {"q8_b32", "q8_b64", "q6_b32", "q6_b64",  "q5_b32",
                                  "q5_b64", "q4_b32", "q4_b64", "q3h_b32", "q3h_b64",
                                  "q3_b32", "q3_b64", "q2_b32", "q2_b64"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == weft::cuda::kQuantGemvFormats);

struct Shape {
  int out, in;
};

// A format of the tables: bf16 (cuda::gemv), a reference kernel, or a GPU-layout format.
struct Format {
  std::string name;
  enum Kind { kBF16, kBlocks, kLayout } kind = kLayout;
  weft::cuda::QuantBlocksFormat blocks{};
  QuantGemvFormat layout{};
  weft::cuda::QuantGemvKernel kernel{};
  std::size_t bytes(Shape s) const {
    if (kind == kBF16) return std::size_t{2} * s.out * s.in;
    if (kind == kBlocks) return weft::cuda::quant_blocks_row_bytes(blocks, s.in) * s.out;
    return weft::cuda::quant_matrix_layout(layout, s.out, s.in).total_bytes();
  }
  void run(const void* x, int tokens, const void* w, Shape s, float* y, cudaStream_t stream) const {
    const auto P = weft::cuda::Precision::kBF16;
    if (kind == kBF16) {
      weft::cuda::gemv(x, tokens, w, s.out, s.in, y, s.out, P, stream);
    } else if (kind == kBlocks) {
      weft::cuda::quant_gemv_blocks(x, tokens, w, blocks, s.out, s.in, y, s.out, P, stream);
    } else {
      weft::cuda::quant_gemv(kernel, x, tokens, {w, layout, s.out, s.in}, y, s.out, P, stream);
    }
  }
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

// Whether the timed calls run as one CUDA graph (as the model's decode steps do), so that host
// launch costs do not hide short kernels; --no-graphs launches them one by one.
bool use_graphs = true;

// Milliseconds per call of `body`, over `iters` calls after one warm-up (as a graph of the
// `iters` calls, replayed 3 times after a warm-up replay, with use_graphs).
template <class F>
double time_ms(cudaStream_t stream, int iters, F&& body) {
  body();
  check(cudaStreamSynchronize(stream), "warm-up");
  check(cudaGetLastError(), "launch");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaGraphExec_t exec = nullptr;
  int replays = 1;
  if (use_graphs) {
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "graph capture");
    for (int i = 0; i < iters; ++i)
      body();
    check(cudaStreamEndCapture(stream, &graph), "graph capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiation");
    cudaGraphDestroy(graph);
    check(cudaGraphLaunch(exec, stream), "graph launch");
    check(cudaStreamSynchronize(stream), "graph warm-up");
    replays = 3;
  }
  cudaEventRecord(start, stream);
  if (exec != nullptr) {
    for (int r = 0; r < replays; ++r)
      check(cudaGraphLaunch(exec, stream), "graph launch");
  } else {
    for (int i = 0; i < iters; ++i)
      body();
  }
  cudaEventRecord(stop, stream);
  check(cudaEventSynchronize(stop), "timed runs");
  check(cudaGetLastError(), "launch");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  return ms / (iters * replays);
}

void* alloc_weights(std::size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, n), "weights");
  // 0x3c: fp16 headers of about 1 (scale and min), codes 12 / 60 / ...; bf16 weights of 0.01.
  check(cudaMemset(p, 0x3c, n), "weights");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows show as they come, even into a pipe
  int tokens = 1, iters = 20, layers = 32;
  std::string formats_arg = "all", kernels_arg = "lanes,mma,stream";
  bool reference = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-reference") {
      reference = false;
      continue;
    }
    if (a == "--no-graphs") {
      use_graphs = false;
      continue;
    }
    if (a == "--help" || a == "-h" || i + 1 >= argc) {
      std::fprintf(
          stderr,
          "usage: cuda_quant_gemv_bench [--tokens N (1-%d)] [--iters N] [--layers N]\n"
          "         [--formats all|NAME,NAME,...] [--kernels lanes,mma,stream,dp4a,auto]\n"
          "         [--no-reference] [--no-graphs]\n"
          "  --kernels: the quant_gemv kernels to run each format through (lanes: CUDA cores,\n"
          "             mma: tensor cores, stream: tensor cores in persistent blocks that\n"
          "             stream the weights, dp4a: q4 with x rounded to 8-bit integers,\n"
          "             auto: the choice by format and token count;\n"
          "             default lanes,mma,stream)\n"
          "  --no-reference: leave out the bf16 and 'blocks' (first kernel) rows\n"
          "  --no-graphs: launch the timed calls one by one (default: one CUDA graph)\n",
          weft::cuda::kQuantGemvMaxTokens);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
    const char* v = argv[++i];
    if (a == "--tokens") {
      tokens = std::atoi(v);
    } else if (a == "--iters") {
      iters = std::atoi(v);
    } else if (a == "--layers") {
      layers = std::atoi(v);
    } else if (a == "--formats") {
      formats_arg = v;
    } else if (a == "--kernels") {
      kernels_arg = v;
    } else {
      std::fprintf(stderr, "unknown option %s (--help lists them)\n", a.c_str());
      return 2;
    }
  }
  if (tokens < 1 || tokens > weft::cuda::kQuantGemvMaxTokens) {
    std::fprintf(stderr, "--tokens must be in [1, %d]\n", weft::cuda::kQuantGemvMaxTokens);
    return 2;
  }
  if (iters < 1 || layers < 1) {
    std::fprintf(stderr, "--iters and --layers must be positive\n");
    return 2;
  }
  std::vector<weft::cuda::QuantGemvKernel> kernels;
  {
    std::stringstream ss(kernels_arg);
    for (std::string item; std::getline(ss, item, ',');) {
      weft::cuda::QuantGemvKernel k{};
      if (!weft::cuda::quant_gemv_kernel_from_name(item.c_str(), k)) {
        std::fprintf(stderr, "--kernels: unknown kernel %s (lanes, mma, stream or auto)\n",
                     item.c_str());
        return 2;
      }
      kernels.push_back(k);
    }
    if (kernels.empty()) {
      std::fprintf(stderr, "--kernels: name at least one kernel (lanes, mma, stream or auto)\n");
      return 2;
    }
  }
  std::vector<Format> formats;
  formats.push_back({"bf16", Format::kBF16});
  if (reference) {
    formats.push_back({"blocks q8_b32", Format::kBlocks, weft::cuda::QuantBlocksFormat::kQ8B32});
    formats.push_back({"blocks q4_b32", Format::kBlocks, weft::cuda::QuantBlocksFormat::kQ4B32});
  }
  {
    std::vector<std::string> wanted;
    std::stringstream ss(formats_arg);
    for (std::string item; std::getline(ss, item, ',');)
      wanted.push_back(item);
    for (int f = 0; f < weft::cuda::kQuantGemvFormats; ++f) {
      bool on = formats_arg == "all";
      for (const auto& w : wanted)
        on = on || w == kNames[f];
      if (!on) continue;
      for (const auto k : kernels) {
        formats.push_back({std::string(kNames[f]) + " " + weft::cuda::quant_gemv_kernel_name(k),
                           Format::kLayout,
                           {},
                           static_cast<QuantGemvFormat>(f),
                           k});
      }
    }
    for (const auto& w : wanted) {
      bool known = w == "all";
      for (const char* n : kNames)
        known = known || w == n;
      if (!known) {
        std::fprintf(stderr, "--formats: unknown format %s\n", w.c_str());
        return 2;
      }
    }
  }
  int devices = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no GPU visible (%s)\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "no devices");
    return 1;
  }
  const double bandwidth = copy_bandwidth_bytes_per_s();
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s; copy bandwidth %.0f GB/s (read+write); %d token(s); %s\n", prop.name,
              bandwidth / 1e9, tokens,
              use_graphs ? "timed calls as one CUDA graph" : "timed calls launched one by one");

  void *x = nullptr, *y = nullptr;
  check(cudaMalloc(&x, sizeof(std::uint16_t) * tokens * 14336), "x");
  check(cudaMemset(x, 0x3c, sizeof(std::uint16_t) * tokens * 14336), "x");
  check(cudaMalloc(&y, sizeof(float) * tokens * 128256), "y");
  auto* yf = static_cast<float*>(y);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");

  // Table 1: one product per shape.
  const std::vector<Shape> shapes = {{4096, 4096},  {1024, 4096},  {6144, 4096},  {14336, 4096},
                                     {28672, 4096}, {4096, 14336}, {128256, 4096}};
  std::printf("\nper product (effective bandwidth: the matrix's bytes / time)\n");
  std::printf("%-14s %-12s %10s %10s %10s %9s\n", "format", "shape", "MB", "us", "GB/s", "% copy");
  for (const Format& f : formats) {
    for (const Shape s : shapes) {
      const std::size_t bytes = f.bytes(s);
      // Copies enough to fill 512 MB, so every product reads its matrix from memory.
      const std::size_t copies = std::max<std::size_t>(2, (std::size_t{512} << 20) / bytes);
      std::vector<void*> w;
      for (std::size_t c = 0; c < copies; ++c)
        w.push_back(alloc_weights(bytes));
      std::size_t next = 0;
      const int calls = std::max<int>(iters * 10, static_cast<int>(copies));
      const double ms = time_ms(stream, calls, [&] {
        f.run(x, tokens, w[next], s, yf, stream);
        next = (next + 1) % copies;
      });
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      char shape[32];
      std::snprintf(shape, sizeof(shape), "%dx%d", s.out, s.in);
      std::printf("%-14s %-12s %10.1f %10.1f %10.0f %8.0f%%\n", f.name.c_str(), shape, bytes / 1e6,
                  ms * 1e3, gbs, gbs * 1e9 / bandwidth * 100);
      for (void* p : w)
        cudaFree(p);
    }
  }

  // Table 1b: the gated MLP's gate_up (28672x4096) with its activation (SiLU), as the model
  // runs it: the kernel's product into fp32 rows then mlp_activation, against quant_gemv_gated
  // through the same kernel (one kernel, 16-bit out). For the mma, stream and dp4a kernels.
  // Kernels with the gated epilogue: mma, and stream, dp4a (or auto) where they resolve to one.
  auto gated_kernel = [tokens](const Format& f) {
    if (f.kind != Format::kLayout) return false;
    const auto k = weft::cuda::quant_gemv_resolve(f.kernel, f.layout, tokens);
    return k == weft::cuda::QuantGemvKernel::kMma || k == weft::cuda::QuantGemvKernel::kStream ||
           k == weft::cuda::QuantGemvKernel::kDp4a;
  };
  bool any_gated = false;
  for (const Format& f : formats)
    any_gated |= gated_kernel(f);
  if (any_gated) {
    std::printf(
        "\ngate_up 28672x4096 + SiLU: product then activation kernel, against fused"
        " (%% copy: the fused one's)\n");
    std::printf("%-14s %12s %12s %9s %9s\n", "format", "2 kernels us", "fused us", "saved",
                "% copy");
    const Shape s{28672, 4096};
    void* act = nullptr;
    check(cudaMalloc(&act, sizeof(std::uint16_t) * tokens * (s.out / 2)), "act");
    for (const Format& f : formats) {
      if (!gated_kernel(f)) continue;
      const std::size_t bytes = f.bytes(s);
      const std::size_t copies = std::max<std::size_t>(2, (std::size_t{512} << 20) / bytes);
      std::vector<void*> w;
      for (std::size_t c = 0; c < copies; ++c)
        w.push_back(alloc_weights(bytes));
      const auto P = weft::cuda::Precision::kBF16;
      const int calls = std::max<int>(iters * 10, static_cast<int>(copies));
      std::size_t next = 0;
      const double two = time_ms(stream, calls, [&] {
        const weft::cuda::QuantMatrixView view{w[next], f.layout, s.out, s.in};
        weft::cuda::quant_gemv(f.kernel, x, tokens, view, yf, s.out, P, stream);
        weft::cuda::mlp_activation(weft::cuda::ActivationKind::kSilu, true, yf, nullptr, tokens,
                                   s.out / 2, act, P, stream);
        next = (next + 1) % copies;
      });
      next = 0;
      const double fused = time_ms(stream, calls, [&] {
        weft::cuda::quant_gemv_gated(f.kernel, weft::cuda::ActivationKind::kSilu, x, tokens,
                                     {w[next], f.layout, s.out, s.in}, act, P, stream);
        next = (next + 1) % copies;
      });
      std::printf("%-14s %12.1f %12.1f %8.1f%% %8.0f%%\n", f.name.c_str(), two * 1e3, fused * 1e3,
                  (two - fused) / two * 100, bytes / (fused * 1e-3) / bandwidth * 100);
      for (void* p : w)
        cudaFree(p);
    }
    cudaFree(act);
  }

  // Table 2: a decode step's products, each gate_up with its activation.
  void* act16 = nullptr;
  check(cudaMalloc(&act16, sizeof(std::uint16_t) * tokens * 14336), "activation");
  const std::vector<Shape> per_layer = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  const Shape head{128256, 4096};
  std::printf("\nbatch-%d decode products: %d layers (gate_up with its SiLU) + lm head\n", tokens,
              layers);
  std::printf("%-14s %10s %12s %10s %10s %9s %8s\n", "format", "weights GB", "ms / token",
              "tokens/s", "floor ms", "vs floor", "vs bf16");
  double bf16_tps = 0;
  for (const Format& f : formats) {
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
      m.data = alloc_weights(f.bytes(m.shape));
      total += f.bytes(m.shape);
    }
    // As the model runs them: gate_up ends in its activation (fused where the kernel resolves
    // to one with the gated epilogue, else the activation kernel after the product).
    const bool fused = gated_kernel(f);
    const double per_token_ms = time_ms(stream, iters, [&] {
      for (const auto& m : matrices) {
        if (m.shape.out != 28672) {
          f.run(x, tokens, m.data, m.shape, yf, stream);
        } else if (fused) {
          weft::cuda::quant_gemv_gated(f.kernel, weft::cuda::ActivationKind::kSilu, x, tokens,
                                       {m.data, f.layout, m.shape.out, m.shape.in}, act16,
                                       weft::cuda::Precision::kBF16, stream);
        } else {
          f.run(x, tokens, m.data, m.shape, yf, stream);
          weft::cuda::mlp_activation(weft::cuda::ActivationKind::kSilu, true, yf, nullptr, tokens,
                                     m.shape.out / 2, act16, weft::cuda::Precision::kBF16, stream);
        }
      }
    });
    const double tps = tokens * 1e3 / per_token_ms;
    const double floor_ms = total / bandwidth * 1e3;
    if (f.kind == Format::kBF16) bf16_tps = tps;
    std::printf("%-14s %10.2f %12.3f %10.1f %10.3f %8.0f%% %7.2fx\n", f.name.c_str(), total / 1e9,
                per_token_ms, tps, floor_ms, floor_ms / per_token_ms * 100,
                bf16_tps > 0 ? tps / bf16_tps : 0.0);
    for (auto& m : matrices)
      cudaFree(m.data);
  }
  cudaFree(act16);
  cudaFree(x);
  cudaFree(y);
  return 0;
}
