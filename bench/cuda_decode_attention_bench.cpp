// Decode attention alone: each decode attention kernel (paged_attention.hpp,
// DecodeAttentionKernel: old = a block per split, new = pipelined, stream = per-warp rings) on
// a batch of decode tokens over 16-bit KV pages with Llama-3-8B's attention shape (32 q heads,
// 8 kv heads, head_dim 128, 16-token pages) by default, as the model launches it in a step of
// decode tokens only (the rotary embedding and the store of the token's own key and value in
// the kernel; --no-rope for plain attention). Prints per (batch, context, kernel): µs per
// layer, ms per step of --step-layers layers (32: the 8b model), the KV read rate in GB/s and
// as a percentage of the device-to-device copy bandwidth measured in the same process (read +
// write bytes, as cuda_forward_bench counts it), and the largest difference from the old
// kernel's output (a sanity check; they differ by rounding only). `read` is not attention: the
// same KV rows read with 16-byte loads through the same page tables (decode_kv_read), the
// ceiling any decode attention kernel can reach on this pool layout.
//
//   cuda_decode_attention_bench [--batches 64,128,256,512] [--contexts 512,2048]
//       [--kernels old,new,stream,read] [--heads 32] [--kv-heads 8] [--head-dim 128]
//       [--page-size 16] [--layers 32] [--step-layers 32] [--repeats 10] [--spread 0]
//       [--no-rope] [--fp16] [--kv-cache-dtype bf16|int8|fp8] [--json FILE]
//
// The pool holds --layers layers per page, as the model's pool does (32 for the 8b model: a
// 16-token page is 2 MB, of which one layer's launch reads 64 KB), cycled through by
// consecutive launches as a step walks the layers, so no layer's pages are still in L2 when it
// is read again; pages are shuffled, as a long-running server's are. Fewer layers make the
// pool fit larger batches (batch 512 x context 2048 needs --layers 8) and change how sparsely
// a launch touches the pool's address space (--layers 1: each launch reads its KV densely),
// which shows what the pool's page layout costs. --spread F draws each sequence's context uniformly
// from [context (1 - F), context (1 + F)] (a batch of mixed lengths; GB/s counts the bytes
// actually read). Rows whose pool does not fit the device are skipped with a note.
// --kv-cache-dtype int8|fp8 fills one-byte pages (random bytes, a plausible scale per row: the
// speed does not depend on the values) in the runtime's layout (each layer block: K and V
// bytes, then K's and V's fp32 scales from a 16-byte aligned offset); attention is then plain
// (the fused rotary embedding is for 16-bit pages only) and `read` is not offered (it reads
// 16-bit rows). GB/s counts the bytes read, scales included.
// WEFT_DECODE_STREAM_STAGES, WEFT_DECODE_STREAM_SEGMENT_KEYS and WEFT_DECODE_PARTS tune the
// streaming kernel (docs/cuda.md); its launch plan is printed beside its rows.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/decode_attention_stream.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/paged_attention.hpp"

namespace {

using namespace weft;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Device-to-device copy bandwidth, read + write bytes per second (cuda_forward_bench's).
double copy_bandwidth_bytes_per_s() {
  const std::size_t bytes = std::size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(a);
    return 0;
  }
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

std::uint16_t to_half_bits(float f, bool fp16) {
  if (fp16) {
    // Values of the normal distribution below: plain rounding of the exponent range used.
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const float a = std::fabs(f);
    if (a < 6.1e-5f) return static_cast<std::uint16_t>(sign);
    int e;
    const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
    const int exp = e - 1 + 15;
    if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7bffu);
    const auto mant = static_cast<std::uint32_t>(std::lround((m * 2 - 1) * 1024)) & 0x3ffu;
    return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) | mant);
  }
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

float half_bits_to_float(std::uint16_t h, bool fp16) {
  if (!fp16) {
    const std::uint32_t x = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                           : std::ldexp(1.0f + mant / 1024.0f, exp - 15);
  return (h & 0x8000) ? -v : v;
}

bool kernel_by_name(const std::string& name, cuda::DecodeAttentionKernel& k) {
  if (name == "old" || name == "split") {
    k = cuda::DecodeAttentionKernel::kSplit;
  } else if (name == "new" || name == "pipelined") {
    k = cuda::DecodeAttentionKernel::kPipelined;
  } else if (name == "stream") {
    k = cuda::DecodeAttentionKernel::kStream;
  } else {
    return false;
  }
  return true;
}

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (call);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(err_));                            \
      return 1;                                                          \
    }                                                                    \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches{64, 128, 256, 512}, contexts{512, 2048};
  std::vector<std::string> kernel_names{"old", "new", "stream", "read"};
  int heads = 32, kv_heads = 8, head_dim = 128, page_size = 16, layers = 32, step_layers = 32;
  int repeats = 10;
  double spread = 0;
  bool rope = true, fp16 = false;
  KvDtype kv_dtype = KvDtype::kBF16;  // kBF16 stands for the 16-bit type (--fp16: fp16)
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--batches") {
      batches = parse_list(next());
    } else if (a == "--contexts") {
      contexts = parse_list(next());
    } else if (a == "--kernels") {
      kernel_names = parse_names(next());
    } else if (a == "--heads") {
      heads = std::stoi(next());
    } else if (a == "--kv-heads") {
      kv_heads = std::stoi(next());
    } else if (a == "--head-dim") {
      head_dim = std::stoi(next());
    } else if (a == "--page-size") {
      page_size = std::stoi(next());
    } else if (a == "--layers") {
      layers = std::stoi(next());
    } else if (a == "--step-layers") {
      step_layers = std::stoi(next());
    } else if (a == "--repeats") {
      repeats = std::stoi(next());
    } else if (a == "--spread") {
      spread = std::stod(next());
    } else if (a == "--no-rope") {
      rope = false;
    } else if (a == "--fp16") {
      fp16 = true;
    } else if (a == "--kv-cache-dtype") {
      const std::string v = next();
      if (v == "int8") {
        kv_dtype = KvDtype::kInt8;
      } else if (v == "fp8") {
        kv_dtype = KvDtype::kFp8E4M3;
      } else if (v != "bf16") {
        std::fprintf(stderr, "--kv-cache-dtype %s: not one of bf16, int8, fp8\n", v.c_str());
        return 2;
      }
    } else if (a == "--json") {
      json_path = next();
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "cuda_decode_attention_bench [--batches 64,128,256,512] [--contexts 512,2048]\n"
          "    [--kernels old,new,stream,read] [--heads 32] [--kv-heads 8] [--head-dim 128]\n"
          "    [--page-size 16] [--layers 32] [--step-layers 32] [--repeats 10] [--spread 0]\n"
          "    [--no-rope] [--fp16] [--kv-cache-dtype bf16|int8|fp8] [--json FILE]\n"
          "Times the decode attention kernels alone (WEFT_DECODE_ATTN's choices) over 16-bit\n"
          "KV pages: us per layer, ms per step of --step-layers layers, KV GB/s and %% of the\n"
          "copy bandwidth measured in the same run, max difference from the old kernel.\n"
          "  --kernels read  not attention: the same KV rows read with 16-byte loads, the\n"
          "                  ceiling for any decode attention kernel on this pool layout\n"
          "  --layers N      layers per page, cycled through (32: the 8b pool's layout)\n"
          "  --spread F      contexts drawn from [c (1 - F), c (1 + F)] per sequence\n"
          "  --no-rope       plain attention (no rotary embedding/store in the kernel)\n"
          "  --fp16          fp16 pages (and output) instead of bf16\n"
          "  --kv-cache-dtype int8|fp8  one-byte pages with a scale per row (no rope, no read)\n"
          "Streaming kernel knobs: WEFT_DECODE_STREAM_STAGES, WEFT_DECODE_STREAM_SEGMENT_KEYS,\n"
          "WEFT_DECODE_STREAM_PART_KEYS, WEFT_DECODE_PARTS (docs/cuda.md).\n");
      return 0;
    } else {
      std::fprintf(stderr, "unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || page_size <= 0 || layers <= 0 ||
      repeats <= 0 || spread < 0 || spread >= 1) {
    std::fprintf(stderr,
                 "bad shape: --heads must be a positive multiple of --kv-heads; --page-size, "
                 "--layers, --repeats positive; --spread in [0, 1)\n");
    return 2;
  }
  const bool one_byte = kv_dtype_scaled(kv_dtype);
  if (one_byte) rope = false;  // decode_attention_applies_rope: 16-bit pages only
  // "read": not attention, the KV read alone (decode_kv_read), the ceiling for the others.
  struct Variant {
    bool read = false;
    cuda::DecodeAttentionKernel kernel = cuda::DecodeAttentionKernel::kSplit;
  };
  std::vector<Variant> kernels;
  for (const auto& n : kernel_names) {
    Variant v;
    if (n == "read") {
      if (head_dim > 128 || one_byte) {
        std::fprintf(stderr, "--kernels read: 16-bit pages of head_dim up to 128\n");
        return 2;
      }
      v.read = true;
    } else if (!kernel_by_name(n, v.kernel)) {
      std::fprintf(stderr, "--kernels: unknown kernel %s (old, new, stream, read)\n", n.c_str());
      return 2;
    }
    kernels.push_back(v);
  }
  const cuda::DeviceList devices = cuda::visible_devices();
  if (devices.devices.empty()) {
    std::fprintf(stderr, "no GPU visible (%s)\n", devices.unavailable_reason.c_str());
    return 1;
  }
  cuda::prepare_attention_kernels();
  const double bandwidth = copy_bandwidth_bytes_per_s();
  const int NH = heads, NKV = kv_heads, D = head_dim;
  const cuda::Precision precision = fp16 ? cuda::Precision::kF16 : cuda::Precision::kBF16;
  // Bytes of one layer block: K and V, then (one-byte pages) their scales, as
  // runtime/model/kv_cache.hpp lays them out.
  const std::size_t elem_bytes = one_byte ? 1 : 2;
  const std::size_t rows_per_layer = 2ull * NKV * page_size;
  const std::size_t scales_offset = (rows_per_layer * D * elem_bytes + 15) / 16 * 16;
  const std::size_t layer_block_bytes =
      one_byte ? (scales_offset + rows_per_layer * 4 + 15) / 16 * 16 : rows_per_layer * D * 2;
  const std::size_t page_bytes = layer_block_bytes * layers;
  std::printf("device %s, %d SMs; copy bandwidth %.0f GB/s (read+write)\n",
              devices.devices[0].name.c_str(), devices.devices[0].multiprocessors, bandwidth / 1e9);
  std::printf(
      "shape: %d q heads, %d kv heads, head_dim %d, %d-token pages, %s pages, %s output, %d "
      "layers in the pool, rope %s, spread %.2f; ms/step = %d layers\n",
      NH, NKV, D, page_size, one_byte ? kv_dtype_name(kv_dtype) : (fp16 ? "fp16" : "bf16"),
      fp16 ? "fp16" : "bf16", layers, rope ? "in kernel" : "off", spread, step_layers);
  std::printf("%6s %8s %-7s %10s %10s %9s %9s %11s  %s\n", "batch", "context", "kernel", "us/layer",
              "ms/step", "GB/s", "% copy", "max|d old|", "plan");
  std::ostringstream json;
  json << "{\"device\":\"" << devices.devices[0].name
       << "\",\"copy_bandwidth_bytes_per_s\":" << bandwidth << ",\"heads\":" << NH
       << ",\"kv_heads\":" << NKV << ",\"head_dim\":" << D << ",\"page_size\":" << page_size
       << ",\"kv_dtype\":\"" << (one_byte ? kv_dtype_name(kv_dtype) : (fp16 ? "fp16" : "bf16"))
       << "\",\"rope\":" << (rope ? "true" : "false") << ",\"spread\":" << spread << ",\"rows\":[";
  bool first_row = true;
  std::mt19937 rng(12345);
  for (int context : contexts) {
    for (int batch : batches) {
      // Contexts, pages and the pool.
      std::vector<int> ctx(batch, context);
      if (spread > 0) {
        std::uniform_int_distribution<int> dist(
            std::max(1, static_cast<int>(context * (1 - spread))),
            std::max(1, static_cast<int>(context * (1 + spread))));
        for (int& c : ctx)
          c = dist(rng);
      }
      long long pages = 0, kv_positions = 0;
      int max_context = 0;
      for (int c : ctx) {
        pages += (c + page_size - 1) / page_size;
        kv_positions += c;
        max_context = std::max(max_context, c);
      }
      const std::size_t pool_bytes = static_cast<std::size_t>(pages) * page_bytes;
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      if (pool_bytes + (std::size_t{2} << 30) > free_bytes) {
        std::printf("%6d %8d  skipped: the pool needs %.1f GB, %.1f GB free (lower --layers)\n",
                    batch, context, pool_bytes / 1e9, free_bytes / 1e9);
        continue;
      }
      std::vector<std::int32_t> ids(pages);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<std::int32_t> positions(batch), token_seq(batch), table_begin(batch),
          queries(batch);
      {
        std::int32_t next = 0;
        for (int s = 0; s < batch; ++s) {
          positions[s] = ctx[s] - 1;
          token_seq[s] = s;
          queries[s] = s;
          table_begin[s] = next;
          next += (ctx[s] + page_size - 1) / page_size;
        }
      }
      void* pool = nullptr;
      CHECK_CUDA(cudaMalloc(&pool, pool_bytes));
      if (!one_byte) {
        // Random 16-bit values in a block of up to 16 MB, copied over the whole pool.
        const std::size_t block = std::min<std::size_t>(pool_bytes / 2, std::size_t{8} << 20);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<std::uint16_t> host(block);
        for (auto& h : host)
          h = to_half_bits(nd(rng), fp16);
        CHECK_CUDA(cudaMemcpy(pool, host.data(), block * 2, cudaMemcpyHostToDevice));
        for (std::size_t off = block; off < pool_bytes / 2; off += block) {
          const std::size_t n = std::min(block, pool_bytes / 2 - off);
          CHECK_CUDA(cudaMemcpy(static_cast<std::uint16_t*>(pool) + off, pool, n * 2,
                                cudaMemcpyDeviceToDevice));
        }
      } else {
        // Whole pages of random bytes (no fp8 NaN: 0x7f and 0xff become their neighbours) and
        // scales of max|x| / 127 or / 448 for rows of about unit size, built on the host for
        // up to 16 MB of pages and copied over the pool.
        const std::size_t block_pages = std::max<std::size_t>(
            1, std::min<std::size_t>(pages, (std::size_t{16} << 20) / page_bytes));
        std::vector<std::uint8_t> host(block_pages * page_bytes, 0);
        std::uniform_int_distribution<int> byte(0, 255);
        const float scale = kv_dtype == KvDtype::kInt8 ? 3.0f / 127 : 3.0f / 448;
        for (std::size_t b = 0; b < block_pages * layers; ++b) {
          std::uint8_t* blk = host.data() + b * layer_block_bytes;
          for (std::size_t i = 0; i < rows_per_layer * D; ++i) {
            int v = byte(rng);
            if (kv_dtype == KvDtype::kFp8E4M3 && (v & 0x7f) == 0x7f) --v;
            blk[i] = static_cast<std::uint8_t>(v);
          }
          for (std::size_t r = 0; r < rows_per_layer; ++r)
            std::memcpy(blk + scales_offset + r * 4, &scale, 4);
        }
        const std::size_t block = block_pages * page_bytes;
        CHECK_CUDA(cudaMemcpy(pool, host.data(), block, cudaMemcpyHostToDevice));
        for (std::size_t off = block; off < pool_bytes; off += block) {
          const std::size_t n = std::min(block, pool_bytes - off);
          CHECK_CUDA(cudaMemcpy(static_cast<std::uint8_t*>(pool) + off, pool, n,
                                cudaMemcpyDeviceToDevice));
        }
      }
      const int width = rope ? (NH + 2 * NKV) * D : NH * D;
      std::vector<float> qh(static_cast<std::size_t>(batch) * width);
      {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& x : qh)
          x = nd(rng);
      }
      std::vector<float> inv_freq(static_cast<std::size_t>(batch) * D / 2), factor(batch, 1.0f);
      for (int s = 0; s < batch; ++s)
        for (int j = 0; j < D / 2; ++j)
          inv_freq[static_cast<std::size_t>(s) * D / 2 + j] =
              std::pow(500000.0f, -2.0f * j / static_cast<float>(D));
      std::int32_t *dpos = nullptr, *dseq = nullptr, *dbegin = nullptr, *dpages = nullptr,
                   *dqueries = nullptr;
      float *dq = nullptr, *dfreq = nullptr, *dfactor = nullptr, *work = nullptr;
      void* out = nullptr;
      // (also the read reference's sink: a word per (query, kv head))
      const std::size_t work_floats =
          std::max<std::size_t>(static_cast<std::size_t>(batch) * NKV,
                                cuda::decode_workspace_floats(batch, NH, D, max_context));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dpos), batch * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dseq), batch * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dbegin), batch * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dqueries), batch * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dpages), pages * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dq), qh.size() * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dfreq), inv_freq.size() * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dfactor), factor.size() * 4));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&work), work_floats * 4));
      CHECK_CUDA(cudaMalloc(&out, static_cast<std::size_t>(batch) * NH * D * 2));
      CHECK_CUDA(cudaMemcpy(dpos, positions.data(), batch * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dseq, token_seq.data(), batch * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dbegin, table_begin.data(), batch * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dqueries, queries.data(), batch * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dpages, ids.data(), pages * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dq, qh.data(), qh.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dfreq, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dfactor, factor.data(), factor.size() * 4, cudaMemcpyHostToDevice));
      cuda::FlatBatchView fb{dpos, dseq, dbegin, dpages, batch};
      cuda::AttentionArgs args;
      args.q = dq;
      args.q_stride = static_cast<std::size_t>(width);
      args.num_heads = NH;
      args.scale = 1.0f / std::sqrt(static_cast<float>(D));
      args.out = out;
      if (rope) {
        args.rope_inv_freq = dfreq;
        args.rope_factor = dfactor;
      }
      auto view = [&](int layer) {
        cuda::PagedKvView kv;
        kv.pool = pool;
        kv.precision = precision;
        // Elements (16-bit pages) or bytes (one-byte pages).
        kv.page_elems = page_bytes / elem_bytes;
        kv.layer_offset = static_cast<std::size_t>(layer) * layer_block_bytes / elem_bytes;
        kv.page_size = page_size;
        kv.num_kv_heads = NKV;
        kv.head_dim = D;
        if (one_byte) {
          kv.dtype = kv_dtype;
          kv.scales_offset = scales_offset;
        }
        return kv;
      };
      // Bytes one layer's launch reads: every position's key and value rows (and scales).
      const double layer_bytes = static_cast<double>(kv_positions) * NKV * 2 *
                                 (static_cast<double>(D) * elem_bytes + (one_byte ? 4 : 0));
      cudaStream_t stream = nullptr;
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      std::vector<std::uint16_t> reference;
      for (const Variant& variant : kernels) {
        const cuda::DecodeAttentionKernel kernel = variant.kernel;
        cuda::set_decode_attention_kernel(kernel);
        const char* name = variant.read ? "read" : cuda::decode_attention_kernel_name(kernel);
        auto run_layers = [&](int n) {
          for (int i = 0; i < n; ++i) {
            if (variant.read) {
              cuda::detail::decode_kv_read(fb, view(i % layers), dqueries, batch,
                                           reinterpret_cast<unsigned*>(work), stream);
            } else {
              cuda::decode_attention(args, fb, view(i % layers), dqueries, batch, max_context, work,
                                     stream);
            }
          }
        };
        // Warm-up (also the output compared: layer 0).
        run_layers(layers);
        if (!variant.read)
          cuda::decode_attention(args, fb, view(0), dqueries, batch, max_context, work, stream);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        CHECK_CUDA(cudaGetLastError());
        std::vector<std::uint16_t> got(static_cast<std::size_t>(batch) * NH * D);
        CHECK_CUDA(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
        double max_diff = 0;
        if (variant.read) {
          // Nothing to compare.
        } else if (kernel == cuda::DecodeAttentionKernel::kSplit) {
          reference = got;
        } else if (!reference.empty()) {
          for (std::size_t i = 0; i < got.size(); ++i)
            max_diff =
                std::max<double>(max_diff, std::fabs(half_bits_to_float(got[i], fp16) -
                                                     half_bits_to_float(reference[i], fp16)));
        }
        // Best of `repeats` runs of step_layers launches.
        double best_ms = 1e30;
        for (int r = 0; r < repeats; ++r) {
          cudaEventRecord(e0, stream);
          run_layers(step_layers);
          cudaEventRecord(e1, stream);
          CHECK_CUDA(cudaEventSynchronize(e1));
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          best_ms = std::min(best_ms, static_cast<double>(ms));
        }
        CHECK_CUDA(cudaGetLastError());
        const double us_layer = best_ms * 1e3 / step_layers;
        const double gbps = layer_bytes / (us_layer * 1e-6) / 1e9;
        const double pct = bandwidth > 0 ? gbps * 1e9 / bandwidth * 100 : 0;
        std::string plan = "-";
        if (!variant.read && kernel == cuda::DecodeAttentionKernel::kStream &&
            cuda::detail::decode_stream_supports(NH, NKV, D, kv_dtype)) {
          const auto p =
              cuda::detail::decode_stream_launch(NH, NKV, D, batch, max_context, kv_dtype);
          plan = "segment " + std::to_string(p.segment_keys) + ", " +
                 std::to_string(p.segments_per_part) + " per part, " + std::to_string(p.parts) +
                 " parts, " + std::to_string(p.stages) + " stages, " +
                 std::to_string(p.blocks_per_sm) + " blocks/SM";
        }
        std::printf("%6d %8d %-7s %10.1f %10.3f %9.0f %8.0f%% %11.2e  %s\n", batch, context, name,
                    us_layer, us_layer * step_layers / 1e3, gbps, pct, max_diff, plan.c_str());
        std::fflush(stdout);
        json << (first_row ? "" : ",") << "{\"batch\":" << batch << ",\"context\":" << context
             << ",\"kernel\":\"" << name << "\",\"us_per_layer\":" << us_layer
             << ",\"ms_per_step\":" << us_layer * step_layers / 1e3 << ",\"gb_per_s\":" << gbps
             << ",\"percent_of_copy\":" << pct << ",\"max_diff_vs_old\":" << max_diff
             << ",\"plan\":\"" << plan << "\"}";
        first_row = false;
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaStreamDestroy(stream);
      for (void* p : {static_cast<void*>(dpos), static_cast<void*>(dseq),
                      static_cast<void*>(dbegin), static_cast<void*>(dqueries),
                      static_cast<void*>(dpages), static_cast<void*>(dq), static_cast<void*>(dfreq),
                      static_cast<void*>(dfactor), static_cast<void*>(work), out, pool})
        cudaFree(p);
    }
  }
  json << "]}\n";
  if (!json_path.empty()) std::ofstream(json_path) << json.str();
  return 0;
}
