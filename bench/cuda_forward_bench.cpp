// CUDA forward pass: prefill latency and TFLOP/s, and decode step time and tokens/s at several
// batch sizes, for a random Llama-shaped model built in memory (nothing to download), or a
// model folder. Prints a table; --json FILE also writes it as JSON.
//
//   cuda_forward_bench [--shape 1b|8b|tiny] [--model DIR] [--precision bf16|fp16]
//                      [--context 512] [--batches 1,8,32,64] [--prefill 512,2048] [--json F]
//                      [--profile] [--small-step-kernel-tokens N] [--logits-to-host]
//                      [--kv-cache-dtype bf16|int8|fp8] [--gpu-memory-fraction F]
//                      [--quantize FORMAT] [--layers N] [--tensor-parallel N] [--mixed P]
//
// --shape 70b has Llama-3-70B's widths (hidden 8192, 64 heads, 8 kv heads, intermediate
// 28672, untied 128256 head); its 80 layers do not fit one H100 in bf16, so give --layers N
// (e.g. 10: about 21 GB). --layers N sets the layer count of any shape.
//
// --tensor-parallel N, under `mpirun -np N` (docs/parallel.md): each rank builds the model,
// keeps its shard (runtime/parallel/sharded_weights.hpp: its heads and MLP slice), runs it on
// the GPU of its local rank and all-reduces over NCCL inside the steps (and their CUDA graphs);
// every rank runs the same rows and rank 0 prints them. Weight bytes and floors are the rank's.
//
// --kv-cache-dtype int8|fp8 runs with quantized KV pages (a scale per token and kv head;
// docs/cuda.md#quantized-kv-pages); --gpu-memory-fraction F sizes the KV pool from the device
// (as `weft serve` does) instead of from the rows' needs, so the pool's pages and tokens, printed
// before the rows, show what a KV type holds in the same memory.
//
// --quantize FORMAT (any of docs/quantization.md, e.g. q4_b32) quantizes the weight matrices as
// the model is built: the GPU keeps only the quantized matrices, steps of up to 24 tokens read
// them through cuda::quant_gemv, larger ones dequantize a matrix at a time for cuBLAS, and the
// floor counts the bytes decode reads (the quantized matrices, a tied lm
// head's 16-bit embedding) instead of the 16-bit weights. Decode steps run as the engine runs them
// on a GPU: launched, then sampled (greedy) on the device with only the tokens copied back;
// --logits-to-host times forward() with every row's fp32 logits copied to the host instead (the
// path before the GPU sampler). Decode rows report the ratio of the step's floor to its time. The
// floor is the larger of the memory floor (the weight bytes plus the KV bytes the step reads, batch
// x context x layers x 2 x kv_dim elements, divided by the device-to-device copy bandwidth measured
// in the same run) and the compute floor (2 FLOP per parameter per token plus attention's 4 x
// context x q_dim per layer and token, divided by the cuBLAS GEMM peak measured in the same run);
// the row names which bound it is. "weights only" is the older ratio that ignored the KV reads.
// --attn-kernels old,new,stream repeats each decode row's timed steps once per decode attention
// kernel (rows ending "attention NAME"), so one process compares whole steps per kernel.
// --mixed P adds "mixed" rows: each decode batch's steps again with a P-token prefill chunk of
// one more sequence in the same step, as a serving engine's chunked prefill mixes them (such
// steps run as plain launches, not graphs); with --profile, their device time per kernel class.
// Decode steps replay CUDA graphs. --profile adds, per decode batch, a few more steps run as plain
// launches with a device event after each kernel class, and prints the device milliseconds per step
// by class; then, where the shape has the tensor-core decode attention kernels (16-bit KV,
// head_dim 64/128/256, up to 8 query heads per kv head), the same steps once with each ("old": a
// block per split, "new": the pipelined kernel, "stream": per-warp rings; WEFT_DECODE_ATTN picks
// the one the rest of the run uses) and their decode attention ms per step and KV read rate (JSON
// decode_attention_kernels). bench/cuda_decode_attention_bench times them alone.
//
// Before the rows it measures the bf16 GEMM peak: cuBLAS (cublasGemmEx, bf16 inputs, fp32
// compute) on 8192^3 with bf16 and with fp32 output, and on the model's prefill products at
// 2048 tokens (qkv, o, gate_up, down; fp32 output as the model writes); the best TFLOP/s is
// printed, written to the JSON (gemm_peak_tflops, with every shape under gemm), and prefill
// rows show their TFLOP/s as a percentage of it.

#include "bench/cuda_forward_bench.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/model/cuda/cuda_model.hpp"
#include "runtime/model/quantize_weights.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/partition_plan.hpp"
#include "runtime/parallel/sharded_weights.hpp"
#if WEFT_HAVE_NCCL
#include "runtime/parallel/nccl_communicator.hpp"
#endif

namespace {

using namespace weft;

using bench::now_s;
using bench::random_llama;
using bench::RandomModel;

// Device-to-device copy bandwidth, counting bytes read and written, as the floor's divisor.
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

struct GemmShape {
  std::string name;
  int m, n, k;  // C [m, n] = A [m, k] B^T, B [n, k] row-major (the model's x W^T)
  bool f32_out;
};

// Best TFLOP/s of cuBLAS on one shape over `reps` timed launches (after warm-up), or 0 when
// something fails (allocation, cuBLAS).
double gemm_tflops(cublasHandle_t handle, const GemmShape& g, int reps) {
  const std::size_t a_bytes = std::size_t{2} * g.m * g.k, b_bytes = std::size_t{2} * g.n * g.k;
  const std::size_t c_bytes = std::size_t{g.f32_out ? 4u : 2u} * g.m * g.n;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  double best = 0;
  if (cudaMalloc(&a, a_bytes) == cudaSuccess && cudaMalloc(&b, b_bytes) == cudaSuccess &&
      cudaMalloc(&c, c_bytes) == cudaSuccess) {
    // Every element 0x3c3c: about 0.012 in bf16 (finite sums; the value does not matter).
    cudaMemset(a, 0x3c, a_bytes);
    cudaMemset(b, 0x3c, b_bytes);
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major view: C^T [n, m] = B [n, k] (as k x n, transposed) * A^T.
    auto launch = [&] {
      return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, g.n, g.m, g.k, &alpha, b, CUDA_R_16BF,
                          g.k, a, CUDA_R_16BF, g.k, &beta, c, g.f32_out ? CUDA_R_32F : CUDA_R_16BF,
                          g.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i)
      ok = launch() == CUBLAS_STATUS_SUCCESS;
    for (int r = 0; r < reps && ok; ++r) {
      cudaEventRecord(e0);
      ok = launch() == CUBLAS_STATUS_SUCCESS;
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (ok && ms > 0) best = std::max(best, 2.0 * g.m * g.n * g.k / (ms * 1e-3) / 1e12);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaGetLastError();
  return best;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(std::stoi(item));
  return out;
}

std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line even into a pipe: a run stopped by a time limit still shows how far it got.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string shape = "1b", model_dir, precision_name = "bf16", json_path;
  int context = 512, repeats = 20;
  bool profile = false;
  bool logits_to_host = false;
  int small_step_tokens = -1;  // the model's default (CudaModelOptions)
  std::string kv_dtype_arg = "bf16";
  double memory_fraction = 0.0;
  std::string quantize_name;
  int layers = 0, tensor_parallel = 1, mixed = 0;
  const int profile_steps = 5;
  std::vector<std::string> attn_kernels;  // --attn-kernels: decode rows per attention kernel
  std::vector<int> batches{1, 8, 32, 64}, prefills{512, 2048};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--shape")
      shape = next();
    else if (a == "--model")
      model_dir = next();
    else if (a == "--precision")
      precision_name = next();
    else if (a == "--context")
      context = std::stoi(next());
    else if (a == "--batches")
      batches = parse_list(next());
    else if (a == "--prefill")
      prefills = parse_list(next());
    else if (a == "--repeats")
      repeats = std::stoi(next());
    else if (a == "--json")
      json_path = next();
    else if (a == "--logits-to-host")
      logits_to_host = true;
    else if (a == "--profile")
      profile = true;
    else if (a == "--attn-kernels")
      attn_kernels = parse_names(next());
    else if (a == "--small-step-kernel-tokens")
      small_step_tokens = std::stoi(next());
    else if (a == "--kv-cache-dtype")
      kv_dtype_arg = next();
    else if (a == "--gpu-memory-fraction")
      memory_fraction = std::stod(next());
    else if (a == "--quantize")
      quantize_name = next();
    else if (a == "--layers")
      layers = std::stoi(next());
    else if (a == "--tensor-parallel")
      tensor_parallel = std::stoi(next());
    else if (a == "--mixed")
      mixed = std::stoi(next());
    else {
      std::fprintf(stderr,
                   "usage: cuda_forward_bench [--shape 1b|8b|tiny | --model DIR] "
                   "[--precision bf16|fp16] [--context N] [--batches 1,8,..] [--prefill 512,..] "
                   "[--logits-to-host] "
                   "[--repeats N] [--json FILE] [--profile] [--small-step-kernel-tokens N] "
                   "[--kv-cache-dtype bf16|int8|fp8] [--gpu-memory-fraction F] "
                   "[--quantize FORMAT (q8_b32 ... q2_b64, docs/quantization.md)] [--layers N] "
                   "[--tensor-parallel N] [--attn-kernels old,new,stream] [--mixed P]\n"
                   "  --small-step-kernel-tokens N: steps of up to N (0-8) tokens through the\n"
                   "  small-step kernel instead of cuBLAS (default -1: 1 under --tensor-parallel,\n"
                   "  else 0, as the engine)\n"
                   "  --mixed P: each decode batch's steps again with a P-token prefill chunk\n"
                   "  of one more sequence in the step (rows \"mixed\", plain launches)\n"
                   "  --shape 70b needs --layers (e.g. 10); --tensor-parallel N runs under "
                   "mpirun -np N, one GPU per rank; its switches are environment variables\n"
                   "  (WEFT_TP_OVERLAP, WEFT_TP_PREFETCH_MB, WEFT_TP_VOCAB_PARALLEL,\n"
                   "  WEFT_TP_BF16_REDUCE_TOKENS: docs/parallel.md); with --profile, each decode\n"
                   "  batch's device ms per step in all-reduces and the head's all-gather\n"
                   "  --profile also times the decode attention kernels on the same steps\n"
                   "  (old: a block per split, new: pipelined, stream: per-warp rings);\n"
                   "  WEFT_DECODE_ATTN=old|new|stream picks"
                   " the one the rest of the run uses (docs/cuda.md)\n");
      return 2;
    }
  }
  if (repeats < 3) {
    std::fprintf(stderr, "--repeats %d: expected 3 or more (the first two steps warm up)\n",
                 repeats);
    return 2;
  }
  if (small_step_tokens < -1 || small_step_tokens > cuda::kGemvMaxTokens) {
    std::fprintf(stderr, "--small-step-kernel-tokens %d: expected -1 (the default) or 0-%d\n",
                 small_step_tokens, cuda::kGemvMaxTokens);
    return 2;
  }
  if (shape != "1b" && shape != "8b" && shape != "70b" && shape != "tiny") {
    std::fprintf(stderr, "--shape %s: not one of tiny, 1b, 8b, 70b\n", shape.c_str());
    return 2;
  }
  // Tensor parallel: the group, this rank and its GPU (the local rank's). An error on one rank
  // ends every rank (MPI_Abort): the others would wait in a collective.
  std::unique_ptr<parallel::Communicator> world;
  int rank = 0, gpu_index = 0;
  auto failed = [&] {
    if (world) parallel::mpi_abort_world(1);
    return 1;
  };
  if (tensor_parallel > 1) {
#if WEFT_HAVE_NCCL
    auto opened = parallel::mpi_world();
    if (!opened) {
      std::fprintf(stderr, "--tensor-parallel: %s\n", opened.error().what());
      return 1;
    }
    world = std::move(opened.value());
    rank = world->rank();
    if (world->size() != tensor_parallel) {
      if (rank == 0) {
        std::fprintf(stderr,
                     "--tensor-parallel %d needs %d processes: launch with mpirun -np %d "
                     "cuda_forward_bench ... (MPI started %d)\n",
                     tensor_parallel, tensor_parallel, tensor_parallel, world->size());
      }
      return 1;
    }
    if (!quantize_name.empty()) {
      if (rank == 0) std::fprintf(stderr, "--quantize: not with --tensor-parallel\n");
      return 1;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
      std::fprintf(stderr, "rank %d: no GPU\n", rank);
      return failed();
    }
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    gpu_index = (local != nullptr ? std::atoi(local) : rank) % count;
    cudaSetDevice(gpu_index);
    // Rank 0 prints the rows; the others only run them.
    if (rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return failed();
#else
    std::fprintf(stderr, "--tensor-parallel: this build has no NCCL (CUDA, NCCL and MPI)\n");
    return 2;
#endif
  }
  const auto devices = cuda::visible_devices();
  if (devices.devices.empty()) {
    std::fprintf(stderr, "no GPU: %s\n", devices.unavailable_reason.c_str());
    return failed();
  }
  quant::QuantType quantize = quant::QuantType::kNone;
  if (!quantize_name.empty()) {
    auto q = quant::parse_quant_type(quantize_name);
    if (!q) {
      std::fprintf(stderr, "--quantize: %s\n", q.error().what());
      return 2;
    }
    quantize = *q;
  }
  RandomModel rm;
  std::optional<LoadedModel> loaded;
  Result<model::Model> built = Error(ErrorCode::kInvalidArgument, "no model");
  const double t_build = now_s();
  if (!model_dir.empty()) {
    LoadOptions load_options;
    load_options.quantize = quantize;
    load_options.tensor_parallel_size = tensor_parallel;
    load_options.tensor_parallel_rank = rank;
    auto l = load_model(model_dir, load_options);
    if (!l) {
      std::fprintf(stderr, "%s\n", l.error().what());
      return failed();
    }
    loaded.emplace(std::move(l.value()));
    built = std::move(loaded->model);
  } else {
    if (shape == "70b" && layers <= 0) {
      std::fprintf(stderr, "--shape 70b: give --layers N (80 layers do not fit one GPU)\n");
      return 2;
    }
    rm = random_llama(shape, layers);
    model::WeightLookup lookup{[&](const std::string& n) -> const TensorView* {
                                 auto it = rm.tensors.find(n);
                                 return it == rm.tensors.end() ? nullptr : &it->second;
                               },
                               [](const std::string&) { return std::string("memory"); }, "memory"};
    if (quantize != quant::QuantType::kNone) {
      cpu::ThreadPool pool(0);
      auto q = model::quantize_weights(lookup, rm.spec, quantize, &pool, {});
      if (!q) {
        std::fprintf(stderr, "%s\n", q.error().what());
        return failed();
      }
      lookup = std::move(q.value());
    }
    if (tensor_parallel > 1) {
      auto plan = parallel::plan_partition(rm.spec, tensor_parallel);
      if (!plan) {
        std::fprintf(stderr, "%s\n", plan.error().what());
        return failed();
      }
      const auto& part = plan->ranks[static_cast<std::size_t>(rank)];
      built = model::Model::create(part.spec, parallel::shard_weights(lookup, part));
    } else {
      built = model::Model::create(rm.spec, lookup);
    }
  }
  if (!built) {
    std::fprintf(stderr, "%s\n", built.error().what());
    return failed();
  }
  const model::Model& cpu_model = built.value();
  const auto& spec = cpu_model.spec();
  int max_batch = 0, max_prefill = 0;
  for (int b : batches)
    max_batch = std::max(max_batch, b);
  for (int p : prefills)
    max_prefill = std::max(max_prefill, p);
  const int page_size = 16;
  // Decode sequences hold the context and the timed steps; the one prefill sequence holds the
  // longest prefill. The pool fits whichever needs more.
  const int decode_pages = (context + repeats + profile_steps + 4 + page_size - 1) / page_size;
  if (mixed < 0 || mixed > 8192) {
    std::fprintf(stderr, "--mixed %d: expected 0 (off) to 8192 prefill tokens\n", mixed);
    return 2;
  }
  const int mixed_pages = (mixed + page_size - 1) / page_size;
  const int prefill_pages = (max_prefill + page_size - 1) / page_size;
  model::CudaModelOptions options;
  options.device = gpu_index;
  options.precision = precision_name == "fp16" ? cuda::Precision::kF16 : cuda::Precision::kBF16;
  options.page_size = page_size;
  const int pages_needed =
      std::max(decode_pages * std::max(max_batch, 1) + mixed_pages, prefill_pages);
  options.num_pages = memory_fraction > 0 ? 0 : pages_needed;
  options.gpu_memory_fraction = memory_fraction;
  options.max_tokens_per_step = std::max(max_prefill, max_batch + mixed);
  options.small_step_kernel_tokens = small_step_tokens;
  if (kv_dtype_arg == "int8") {
    options.kv_dtype = KvDtype::kInt8;
  } else if (kv_dtype_arg == "fp8") {
    options.kv_dtype = KvDtype::kFp8E4M3;
  } else if (kv_dtype_arg != "bf16" && kv_dtype_arg != "auto") {
    std::fprintf(stderr, "--kv-cache-dtype %s: not one of bf16, int8, fp8\n", kv_dtype_arg.c_str());
    return 2;
  }
  const double t_upload = now_s();
  // Declared before the model, so the model (and the graphs that hold NCCL's kernels) goes
  // first.
  std::unique_ptr<parallel::Communicator> nccl;
  auto gpu_r = model::CudaModel::create(cpu_model, options);
  if (!gpu_r) {
    std::fprintf(stderr, "%s\n", gpu_r.error().what());
    return failed();
  }
  model::CudaModel& gpu = gpu_r.value();
  const double upload_s = now_s() - t_upload;
#if WEFT_HAVE_NCCL
  if (world) {
    auto made = parallel::make_nccl_communicator(*world, gpu_index, gpu.cuda_stream());
    if (!made) {
      std::fprintf(stderr, "rank %d: %s\n", rank, made.error().what());
      return failed();
    }
    nccl = std::move(made.value());
    if (auto ok = gpu.set_tensor_parallel(*nccl); !ok) {
      std::fprintf(stderr, "rank %d: %s\n", rank, ok.error().what());
      return failed();
    }
    std::printf(
        "tensor parallel %d: rank 0 on GPU %d holds %d q heads, %d kv heads, intermediate %d\n",
        tensor_parallel, gpu_index, spec.num_heads, gpu.kv_layout().num_kv_heads,
        spec.intermediate_size);
    std::printf("tensor parallel buffers: %s\n", gpu.tensor_parallel_buffers().c_str());
    std::printf("tensor parallel fused norm: %s\n", gpu.fused_norm().c_str());
    std::printf("tensor parallel bf16 all-reduces: %s\n",
                gpu.bf16_reduce_tokens() > 0
                    ? ("from " + std::to_string(gpu.bf16_reduce_tokens()) + " tokens").c_str()
                    : "off");
  }
#endif
  const auto& kv_layout = gpu.kv_layout();
  if (gpu.num_pages() < pages_needed) {
    std::fprintf(stderr,
                 "the KV pool has %d pages; the rows need %d (raise --gpu-memory-fraction)\n",
                 gpu.num_pages(), pages_needed);
    return failed();
  }
  std::printf("KV pool: %d pages of %d tokens = %lld tokens, %s pages of %zu bytes (%.2f GB)\n",
              gpu.num_pages(), page_size, static_cast<long long>(gpu.num_pages()) * page_size,
              kv_dtype_name(kv_layout.dtype), kv_layout.bytes_per_page(),
              static_cast<double>(kv_layout.bytes_per_page()) * gpu.num_pages() / 1e9);
  const double bandwidth = copy_bandwidth_bytes_per_s();
  // Quantized: what decode reads (the quantized matrices; a tied head's 16-bit embedding).
  double weight_bytes = static_cast<double>(gpu.weight_bytes()), quantized_params = 0;
  if (cpu_model.weight_quantization() != quant::QuantType::kNone) {
    weight_bytes = 0;
    auto add = [&](const cpu::WeightMatrix& w) {
      if (w.data == nullptr) return;
      weight_bytes += static_cast<double>(w.rows * w.row_bytes());
      quantized_params += static_cast<double>(w.rows * w.cols);
    };
    for (const auto& L : cpu_model.layers()) {
      for (const cpu::WeightMatrix* w :
           {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate_up, &L.gate, &L.up, &L.down}) {
        add(*w);
      }
    }
    const cpu::WeightMatrix& head = cpu_model.lm_head();
    // A tied head is read as the 16-bit embedding.
    weight_bytes += static_cast<double>(head.quantized() ? head.rows * head.row_bytes()
                                                         : head.rows * head.cols * 2);
    quantized_params += static_cast<double>(head.rows * head.cols);
    precision_name += " + " + quantize_name;
  }
  const double floor_s = weight_bytes / bandwidth;
  const auto& d = devices.devices[0];
  std::printf("device %s; model %s, %.2f GB of %s weights (built in %.1f s, uploaded in %.1f s)\n",
              d.name.c_str(), spec.architecture.c_str(), weight_bytes / 1e9, precision_name.c_str(),
              t_upload - t_build, upload_s);
  std::printf(
      "device copy bandwidth %.0f GB/s (read+write); weights-only decode floor %.3f ms/step\n",
      bandwidth / 1e9, floor_s * 1e3);

  // The bf16 GEMM peak (see the top of the file).
  std::vector<GemmShape> gemm_shapes{{"8192^3 bf16 out", 8192, 8192, 8192, false},
                                     {"8192^3 fp32 out", 8192, 8192, 8192, true}};
  const int hid = spec.hidden_size;
  gemm_shapes.push_back({"qkv 2048", 2048, spec.q_dim() + 2 * spec.kv_dim(), hid, true});
  gemm_shapes.push_back({"o 2048", 2048, hid, spec.q_dim(), true});
  gemm_shapes.push_back({"gate_up 2048", 2048, 2 * spec.intermediate_size, hid, true});
  gemm_shapes.push_back({"down 2048", 2048, hid, spec.intermediate_size, true});
  double gemm_peak = 0;
  std::ostringstream gemm_json;
  {
    cublasHandle_t handle = nullptr;
    if (cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) {
      std::printf("cuBLAS bf16 GEMM (fp32 compute), best of 20:");
      bool first = true;
      for (const auto& g : gemm_shapes) {
        const double tf = gemm_tflops(handle, g, 20);
        gemm_peak = std::max(gemm_peak, tf);
        std::printf(" %s (%dx%dx%d) %.0f;", g.name.c_str(), g.m, g.n, g.k, tf);
        gemm_json << (first ? "" : ",") << "{\"shape\":\"" << g.name << "\",\"m\":" << g.m
                  << ",\"n\":" << g.n << ",\"k\":" << g.k << ",\"tflops\":" << tf << "}";
        first = false;
      }
      cublasDestroy(handle);
      std::printf(" TFLOP/s\ngemm peak %.0f TFLOP/s\n", gemm_peak);
    }
  }

  // How the group's collectives hold their buffers (for the JSON: no quotes or backslashes).
  std::string tp_buffers = tensor_parallel > 1 ? gpu.tensor_parallel_buffers() : "none";
  std::string tp_fused = tensor_parallel > 1 ? gpu.fused_norm() : "none";
  for (std::string* text : {&tp_buffers, &tp_fused}) {
    std::replace_if(
        text->begin(), text->end(), [](char c) { return c == '"' || c == '\\'; }, '\'');
  }
  std::ostringstream json;
  json << "{\"device\":\"" << d.name << "\",\"tensor_parallel\":" << tensor_parallel
       << ",\"model\":\"" << spec.architecture << "\",\"precision\":\"" << precision_name
       << "\",\"weight_bytes\":" << weight_bytes << ",\"copy_bandwidth_bytes_per_s\":" << bandwidth
       << ",\"gemm_peak_tflops\":" << gemm_peak << ",\"gemm\":[" << gemm_json.str()
       << "],\"tensor_parallel_buffers\":\"" << tp_buffers << "\",\"tensor_parallel_fused_norm\":\""
       << tp_fused << "\",\"rows\":[";
  bench::RowInputs rows;
  rows.gpu = &gpu;
  rows.spec = &spec;
  rows.prefills = prefills;
  rows.batches = batches;
  rows.context = context;
  rows.repeats = repeats;
  rows.profile_steps = profile_steps;
  rows.profile = profile;
  rows.logits_to_host = logits_to_host;
  rows.attn_kernels = attn_kernels;
  rows.mixed = mixed;
  rows.page_size = page_size;
  rows.prefill_pages = prefill_pages;
  rows.decode_pages = decode_pages;
  rows.weight_bytes = weight_bytes;
  rows.quantized_params = quantized_params;
  rows.bandwidth = bandwidth;
  rows.floor_s = floor_s;
  rows.gemm_peak = gemm_peak;
  rows.failed = failed;
  if (const int code = bench::run_rows(rows, json); code != 0) return code;
  // Device memory in use once every row ran (weights, KV pool, step buffers, cuBLAS and the
  // CUDA context): allocations only grow, so this is the peak.
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  const double used = static_cast<double>(total_bytes - free_bytes);
  std::printf("device memory in use: %.2f GB of %.2f GB (KV pool %d pages)\n", used / 1e9,
              static_cast<double>(total_bytes) / 1e9, gpu.num_pages());
  json << "],\"device_memory_used_bytes\":" << used << ",\"kv_cache_dtype\":\""
       << kv_dtype_name(kv_layout.dtype) << "\",\"kv_pool_pages\":" << gpu.num_pages()
       << ",\"kv_pool_tokens\":" << static_cast<long long>(gpu.num_pages()) * page_size
       << ",\"kv_page_bytes\":" << kv_layout.bytes_per_page() << "}\n";
  if (!json_path.empty() && rank == 0) std::ofstream(json_path) << json.str();
  return 0;
}
