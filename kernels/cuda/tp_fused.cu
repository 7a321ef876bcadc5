#include "kernels/cuda/tp_fused.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
#endif
// NCCL 2.28's device API: its structures are not versioned before 2.29 (whose ncclDevComm
// and requirement structures begin with a size, magic and version), so the kernels are built
// only against 2.28 headers, and the communicator uses them with a 2.28 library only
// (nccl_communicator.cpp checks the run-time version).
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22800 && NCCL_VERSION_CODE < 22900 && \
    __has_include(<nccl_device.h>)
#define WEFT_TP_FUSED 1
#include <nccl_device.h>
#endif

#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/ll_exchange.cuh"

namespace weft::cuda {

#if defined(WEFT_TP_FUSED)
namespace {

// The generic kernel's block, as add_norm_kernel's (norm.cu), so that the per-thread element
// sets and the block reduction are the same and the results bitwise equal.
constexpr int kThreads = 256;

struct Params {
  ncclWindow_t window;
  ncclLsaBarrierHandle barrier;
  std::size_t offset;
  int ranks;
  int n;
  float* residual;
  const float* delta_bias;
  NormKind kind;
  const float* weight;
  const float* bias;
  float eps;
  void* out;
  float* sum_out;
  // The LL exchange (fused_vec_kernel<T, true>): this rank, the byte offset of the receive
  // area in the window and the rows and width it was sized for, and the epoch counters.
  int rank;
  std::size_t ll_offset;
  int ll_rows;
  int ll_width;
  unsigned* ll_epochs;
  bool pushed;   // the product before stored this rank's lines in the peers' areas
  bool release;  // griddepcontrol.launch_dependents after the wait (dependent_launch.cuh)
};

// Blocks b of every rank meet at barrier b: the release by each rank covers its partial rows
// (written by the product kernel before this one: grid_dependency_wait has seen it complete),
// the acquire makes the other ranks' rows readable. The session keeps the barrier's epoch in
// NCCL's resource buffer, so graph replays continue from where the last launch left it.
__device__ __forceinline__ void meet(const ncclDevComm& comm, const Params& p) {
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), comm, ncclTeamLsa(comm), p.barrier,
                                         blockIdx.x);
  bar.sync(ncclCoopCta(), ::cuda::memory_order_acq_rel);
}

// Rank r's partial row of this block, through the window's load/store mapping.
__device__ __forceinline__ const float* partial(const Params& p, int r) {
  const std::size_t row = p.offset + static_cast<std::size_t>(blockIdx.x) * p.n * sizeof(float);
  return static_cast<const float*>(ncclGetLsaPointer(p.window, row, r));
}

// Loads of the other ranks' rows: volatile (relaxed at system scope: never the read-only
// path nor a stale L1 line; the memory is rewritten by other GPUs between launches), after
// the barrier's acquire: the LL exchange's loads (ll_exchange.cuh), read as floats.
__device__ __forceinline__ float4 load_shared4(const float* p) {
  const uint4 v = detail::ll_load_line(reinterpret_cast<const uint4*>(p));
  return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                     __uint_as_float(v.w));
}
__device__ __forceinline__ float load_shared(const float* p) {
  return __uint_as_float(detail::ll_load_counter(reinterpret_cast<const unsigned*>(p)));
}

// The LL ("low latency") exchange, NCCL's LL protocol in shape: instead of a barrier and
// then loads of the peers' rows over NVLink (a round trip after a round trip), every rank
// stores its own partial row into each peer's receive area in 16-byte lines of two
// (value, flag) pairs, the flag being this launch's epoch, and spins on its own area until
// every line it needs carries the epoch. An 8-byte pair lands whole, so a line whose flags
// match holds this launch's values; one one-way trip over NVLink instead of three.
//
// Receive area (TpFusedGroup::ll_offset; tp_fused_ll_bytes; ll_exchange.cuh): [2 parities]
// [ranks senders][ll_rows][ll_width / 2] lines of 16 bytes, then ll_rows epoch counters (this
// rank's own, never read by peers). Block b's launches count in epoch counter b; a launch uses
// the parity of its epoch. A rank cannot get two launches of row b ahead of a peer still
// reading one: the launch after next needs the peer's push of the next one, made only after
// the peer finished reading this one (by the fused kernel, or by the product before it, which
// starts its pushes after the kernels before it, the peer's read among them, completed). So the
// other parity's lines are never overwritten while read.
__device__ __forceinline__ std::size_t ll_line(const Params& p, unsigned parity, int sender,
                                               int row) {
  return p.ll_offset + detail::ll_row_bytes(p.ranks, p.ll_rows, p.ll_width, parity, sender, row);
}

// Elements [i, i + 4) of this block's row summed over the ranks in rank order, by the LL
// exchange. Every thread of the block calls it once (it holds a block barrier).
__device__ __forceinline__ float4 ll_sum4(const Params& p, int i) {
  __shared__ unsigned epoch_s;
  if (threadIdx.x == 0) {
    const unsigned e = detail::ll_next_epoch(p.ll_epochs[blockIdx.x]);
    p.ll_epochs[blockIdx.x] = e;  // read again only by later launches (and products' pushes)
    epoch_s = e;
  }
  __syncthreads();
  const unsigned e = epoch_s, parity = e & 1u;
  const float4 mine = load_shared4(partial(p, p.rank) + i);
  // Pushed: the product before stored these lines itself (ll_push.hpp).
  if (!p.pushed) {
    const uint4 l0 = detail::ll_line(mine.x, mine.y, e);
    const uint4 l1 = detail::ll_line(mine.z, mine.w, e);
    const std::size_t at = ll_line(p, parity, p.rank, blockIdx.x) + static_cast<std::size_t>(i) * 8;
    for (int r = 0; r < p.ranks; ++r) {
      if (r == p.rank) continue;
      uint4* dst = static_cast<uint4*>(ncclGetLsaPointer(p.window, at, r));
      detail::ll_store_line(dst, l0);
      detail::ll_store_line(dst + 1, l1);
    }
  }
  float4 dv = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int r = 0; r < p.ranks; ++r) {
    float4 q = mine;
    if (r != p.rank) {
      const std::size_t from = ll_line(p, parity, r, blockIdx.x) + static_cast<std::size_t>(i) * 8;
      const uint4* src = static_cast<const uint4*>(ncclGetLsaPointer(p.window, from, p.rank));
      uint4 a, b;
      do {
        a = detail::ll_load_line(src);
        b = detail::ll_load_line(src + 1);
      } while (a.y != e || a.w != e || b.y != e || b.w != e);
      q = make_float4(__uint_as_float(a.x), __uint_as_float(a.z), __uint_as_float(b.x),
                      __uint_as_float(b.z));
    }
    if (r == 0) {
      dv = q;
    } else {
      dv.x += q.x, dv.y += q.y, dv.z += q.z, dv.w += q.w;
    }
  }
  return dv;
}

// Rows of n = 4 * blockDim.x (n % 128 == 0, up to 4096), 16-byte aligned: add_norm_vec_kernel's
// arithmetic, with the delta summed over the ranks in rank order, after a barrier and loads of
// the peers' rows, or by the LL exchange (kLL; the same sums, bit for bit).
template <class T, bool kLL>
__global__ void __launch_bounds__(1024) fused_vec_kernel(const ncclDevComm comm, const Params p) {
  __shared__ float scratch[32];
  const int i = 4 * threadIdx.x;
  float4 w = {0.0f, 0.0f, 0.0f, 0.0f};
  if (p.residual != nullptr) w = *reinterpret_cast<const float4*>(p.weight + i);
  detail::grid_dependency_wait_then_release(p.release);
  float4 dv;
  if constexpr (kLL) {
    (void)comm;
    dv = ll_sum4(p, i);
  } else {
    meet(comm, p);
    dv = load_shared4(partial(p, 0) + i);
    for (int r = 1; r < p.ranks; ++r) {
      const float4 q = load_shared4(partial(p, r) + i);
      dv.x += q.x, dv.y += q.y, dv.z += q.z, dv.w += q.w;
    }
  }
  const std::size_t at = static_cast<std::size_t>(blockIdx.x) * p.n + i;
  if (p.residual == nullptr) {
    *reinterpret_cast<float4*>(p.sum_out + at) = dv;
    return;
  }
  float4* x = reinterpret_cast<float4*>(p.residual + at);
  float4 v = *x;
  if (p.delta_bias != nullptr) {
    const float4 b = *reinterpret_cast<const float4*>(p.delta_bias + i);
    dv.x += b.x, dv.y += b.y, dv.z += b.z, dv.w += b.w;
  }
  v.x += dv.x, v.y += dv.y, v.z += dv.z, v.w += dv.w;
  float sum;
  if (p.kind == NormKind::kRms) {
    sum = v.x * v.x;
    sum += v.y * v.y;
    sum += v.z * v.z;
    sum += v.w * v.w;
  } else {
    sum = v.x + v.y + v.z + v.w;
  }
  sum = detail::block_sum(sum, scratch);
  *x = v;
  float mean = 0.0f, inv = 0.0f;
  if (p.kind == NormKind::kRms) {
    inv = rsqrtf(sum / p.n + p.eps);
  } else {
    mean = sum / p.n;
    const float c0 = v.x - mean, c1 = v.y - mean, c2 = v.z - mean, c3 = v.w - mean;
    float var = c0 * c0;
    var += c1 * c1;
    var += c2 * c2;
    var += c3 * c3;
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / p.n + p.eps);
  }
  float y[4] = {(v.x - mean) * inv * w.x, (v.y - mean) * inv * w.y, (v.z - mean) * inv * w.z,
                (v.w - mean) * inv * w.w};
  if (p.bias != nullptr) {
    const float4 b = *reinterpret_cast<const float4*>(p.bias + i);
    y[0] += b.x, y[1] += b.y, y[2] += b.z, y[3] += b.w;
  }
  T* out = static_cast<T*>(p.out) + at;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    out[k] = detail::from_float<T>(y[k]);
}

// The rank-ordered sums of elements [4j, 4j + 4) of this block's row, j = threadIdx.x,
// threadIdx.x + blockDim.x, ... below n / 4, kUnroll groups at a time: every group's loads
// from every rank are issued before any is summed. (One remote load at a time, as the first
// version did, kept a thread waiting on NVLink for each of its n / 256 * ranks elements: an
// 8192-wide row took 80 us on four H200s.) `put(j, sum)` receives each group's sum.
constexpr int kMaxRanks = 8, kUnroll = 4;
template <class Put>
__device__ __forceinline__ void gather_sums4(const Params& p, const float* const* part, Put put) {
  const int groups = p.n / 4;
  for (int j0 = threadIdx.x; j0 < groups; j0 += kUnroll * blockDim.x) {
    float4 v[kUnroll][kMaxRanks];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * blockDim.x;
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r)
        if (r < p.ranks && j < groups) v[u][r] = load_shared4(part[r] + 4 * j);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * blockDim.x;
      if (j >= groups) break;
      float4 d = v[u][0];
#pragma unroll
      for (int r = 1; r < kMaxRanks; ++r) {
        if (r < p.ranks) d.x += v[u][r].x, d.y += v[u][r].y, d.z += v[u][r].z, d.w += v[u][r].w;
      }
      put(j, d);
    }
  }
}

// The rank-ordered sum of every element of this block's row: by gather_sums4 when `vec`
// (put4(j, sum of [4j, 4j + 4))), else one float at a time, element i by thread
// i % blockDim.x (put1(i, sum of i)).
template <class Put4, class Put1>
__device__ __forceinline__ void gather_sums(const Params& p, const float* const* part, bool vec,
                                            Put4 put4, Put1 put1) {
  if (vec) {
    gather_sums4(p, part, put4);
    return;
  }
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
    float d = load_shared(part[0] + i);
    for (int r = 1; r < p.ranks; ++r)
      d += load_shared(part[r] + i);
    put1(i, d);
  }
}

// Any n: add_norm_kernel's arithmetic (thread t owns elements t, t + 256, ...; the residual is
// written back by the thread that read it, before the reduction instead of after, with the
// same values). The summed row is gathered first, by 16-byte loads with many in flight when
// the row and the window offset allow (n % 4 == 0, 16-byte aligned), into shared memory
// (n floats of dynamic shared memory), so that the loads over NVLink do not follow
// add_norm's element order. Each element's sum is still taken in rank order, so the result
// does not depend on which thread gathered it.
template <class T>
__global__ void __launch_bounds__(kThreads) fused_kernel(const ncclDevComm comm, const Params p) {
  __shared__ float scratch[32];
  extern __shared__ float delta_s[];
  detail::grid_dependency_wait_then_release(p.release);
  meet(comm, p);
  const float* part[kMaxRanks];
  for (int r = 0; r < p.ranks; ++r)
    part[r] = partial(p, r);
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * p.n;
  const bool vec = p.n % 4 == 0 && p.offset % 16 == 0;
  if (p.residual == nullptr) {
    float* o = p.sum_out + row;
    gather_sums(
        p, part, vec,
        [&](int j, float4 d) {
          o[4 * j] = d.x, o[4 * j + 1] = d.y, o[4 * j + 2] = d.z, o[4 * j + 3] = d.w;
        },
        [&](int i, float d) { o[i] = d; });
    return;
  }
  gather_sums(
      p, part, vec, [&](int j, float4 d) { reinterpret_cast<float4*>(delta_s)[j] = d; },
      [&](int i, float d) { delta_s[i] = d; });
  __syncthreads();
  float* x = p.residual + row;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
    float v = x[i];
    v += delta_s[i] + (p.delta_bias != nullptr ? p.delta_bias[i] : 0.0f);
    x[i] = v;
    sum += p.kind == NormKind::kRms ? v * v : v;
  }
  sum = detail::block_sum(sum, scratch);
  float mean = 0.0f, inv = 0.0f;
  if (p.kind == NormKind::kRms) {
    inv = rsqrtf(sum / p.n + p.eps);
  } else {
    mean = sum / p.n;
    float var = 0.0f;
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
      const float c = x[i] - mean;
      var += c * c;
    }
    var = detail::block_sum(var, scratch);
    inv = rsqrtf(var / p.n + p.eps);
  }
  T* out = static_cast<T*>(p.out) + row;
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
    float y = (x[i] - mean) * inv * p.weight[i];
    if (p.bias != nullptr) y += p.bias[i];
    out[i] = detail::from_float<T>(y);
  }
}

// The generic kernel's dynamic shared memory: the summed row (none for a sum alone). Rows
// wider than the default 48 KB (12,288 floats) ask for more once per kernel, up to what the
// GPU allows (Hopper: 227 KB, rows of 58,000 floats); wider rows are refused.
template <class T>
bool generic_shared(int n, bool sum_only, std::size_t* bytes) {
  *bytes = sum_only ? 0 : static_cast<std::size_t>(n) * sizeof(float);
  if (*bytes <= 48 * 1024) return true;
  static std::atomic<int> granted{48 * 1024};
  if (static_cast<int>(*bytes) <= granted.load()) return true;
  int device = 0, most = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const int static_bytes = 32 * sizeof(float);
  if (static_cast<int>(*bytes) + static_bytes > most) return false;
  if (cudaFuncSetAttribute(fused_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           most - static_bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  granted.store(most - static_bytes);
  return true;
}

__global__ void probe_kernel(const ncclDevComm comm, ncclWindow_t window,
                             ncclLsaBarrierHandle barrier, std::size_t offset, int ranks,
                             std::uint64_t* pointers, float* values) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  pointers[0] = reinterpret_cast<std::uint64_t>(ncclGetLocalPointer(window, 0));
  for (int r = 0; r < ranks; ++r) {
    pointers[1 + r] = reinterpret_cast<std::uint64_t>(ncclGetLsaPointer(window, 0, r));
    values[r] = *static_cast<volatile const float*>(ncclGetLsaPointer(window, offset, r));
  }
  pointers[1 + ranks] =
      reinterpret_cast<std::uint64_t>(ncclGetResourceBufferLocalPointer(comm, barrier.bufHandle));
  // 1 when the resource window's device copy and the communicator's inlined copy agree.
  pointers[2 + ranks] =
      comm.resourceWindow != nullptr &&
      comm.resourceWindow->lsaFlatBase == comm.resourceWindow_inlined.lsaFlatBase &&
      comm.resourceWindow->stride4G == comm.resourceWindow_inlined.stride4G;
}

// Every rank's LL receive area (byte `offset` of its part of the window) as this GPU addresses
// it, into `areas`.
__global__ void ll_areas_kernel(ncclWindow_t window, std::size_t offset, int ranks,
                                std::uint64_t* areas) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (int r = 0; r < ranks; ++r)
    areas[r] = reinterpret_cast<std::uint64_t>(ncclGetLsaPointer(window, offset, r));
}

ncclLsaBarrierHandle barrier_of(const TpFusedGroup& g) {
  ncclLsaBarrierHandle h{};
  h.bufHandle = g.barrier_buffer;
  h.nBarriers = g.barriers;
  return h;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0;
}

}  // namespace

bool tp_fused_built() noexcept {
  return true;
}
std::size_t tp_fused_ll_bytes(int ranks, int rows, int width) noexcept {
  if (ranks < 1 || rows < 1 || width < 4) return 0;
  const std::size_t lines = 2ull * ranks * rows * static_cast<std::size_t>(width) * 8;
  return lines + (static_cast<std::size_t>(rows) * sizeof(unsigned) + 15) / 16 * 16;
}
bool tp_fused_enable_ll(TpFusedGroup& group, void* local, std::size_t offset, int rows, int width) {
  const std::size_t bytes = tp_fused_ll_bytes(group.ranks, rows, width);
  if (bytes == 0 || local == nullptr || offset % 16 != 0 || width % 4 != 0) return false;
  char* area = static_cast<char*>(local) + offset;
  if (cudaMemset(area, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  group.ll_offset = offset;
  group.ll_rows = rows;
  group.ll_width = width;
  // The epoch counters end the area (tp_fused_ll_bytes).
  group.ll_epochs = reinterpret_cast<unsigned*>(
      area + bytes - (static_cast<std::size_t>(rows) * sizeof(unsigned) + 15) / 16 * 16);
  return true;
}
bool tp_fused_enable_push(TpFusedGroup& group, cudaStream_t stream) {
  if (group.ll_rows <= 0 || group.window == nullptr || group.ranks < 2 ||
      group.ranks > kLlMaxRanks) {
    return false;
  }
  std::uint64_t* areas = nullptr;
  if (cudaMalloc(&areas, sizeof(std::uint64_t) * kLlMaxRanks) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::uint64_t got[kLlMaxRanks] = {};
  ll_areas_kernel<<<1, 32, 0, stream>>>(static_cast<ncclWindow_t>(group.window), group.ll_offset,
                                        group.ranks, areas);
  const bool ok =
      cudaGetLastError() == cudaSuccess &&
      cudaMemcpyAsync(got, areas, sizeof(got), cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
      cudaStreamSynchronize(stream) == cudaSuccess;
  cudaFree(areas);
  if (!ok) {
    cudaGetLastError();
    return false;
  }
  for (int r = 0; r < group.ranks; ++r) {
    if (got[r] == 0) return false;
  }
  for (int r = 0; r < group.ranks; ++r)
    group.ll_area[r] = reinterpret_cast<char*>(got[r]);
  return true;
}
int tp_fused_header_version() noexcept {
  return NCCL_VERSION_CODE;
}
std::size_t tp_fused_dev_comm_bytes() noexcept {
  return sizeof(ncclDevComm);
}

bool allreduce_add_norm(const AllReduceNormArgs& a, cudaStream_t stream) {
  const TpFusedGroup& g = a.group;
  if (g.dev_comm == nullptr || g.window == nullptr || g.ranks < 1 || g.ranks > 8 || a.rows < 0 ||
      a.rows > g.barriers || a.n <= 0 || g.rank < 0 || g.rank >= g.ranks ||
      (g.ll_rows > 0 && (g.ll_epochs == nullptr || g.ll_width % 4 != 0 || g.ll_offset % 16 != 0))) {
    return false;
  }
  if (a.residual != nullptr ? a.weight == nullptr || a.out == nullptr : a.sum_out == nullptr) {
    return false;
  }
  if (a.rows == 0) return true;
  Params p{};
  p.window = static_cast<ncclWindow_t>(g.window);
  p.barrier = barrier_of(g);
  p.offset = a.offset;
  p.ranks = g.ranks;
  p.n = a.n;
  p.residual = a.residual;
  p.delta_bias = a.delta_bias;
  p.kind = a.kind;
  p.weight = a.weight;
  p.bias = a.bias;
  p.eps = a.eps;
  p.out = a.out;
  p.sum_out = a.sum_out;
  p.rank = g.rank;
  p.ll_offset = g.ll_offset;
  p.ll_rows = g.ll_rows;
  p.ll_width = g.ll_width;
  p.ll_epochs = g.ll_epochs;
  p.pushed = a.pushed;
  p.release = detail::release_early(detail::kReleaseFusedNorm);
  const auto& comm = *static_cast<const ncclDevComm*>(g.dev_comm);
  // add_norm takes its float4 kernel on these conditions; the fused kernel must take the
  // matching one to round alike.
  if (a.n % 128 == 0 && a.n <= 4096 && a.offset % 16 == 0 && aligned16(a.residual) &&
      aligned16(a.delta_bias) && aligned16(a.weight) && aligned16(a.bias) && aligned16(a.out) &&
      aligned16(a.sum_out)) {
    const bool ll = g.ll_rows > 0 && a.rows <= g.ll_rows && a.n <= g.ll_width;
    if (a.pushed && !ll) return false;  // nobody would have pushed these rows
    WEFT_DISPATCH_PRECISION(a.precision, {
      if (ll) {
        detail::launch(fused_vec_kernel<T, true>, a.rows, a.n / 4, 0, stream, comm, p);
      } else {
        detail::launch(fused_vec_kernel<T, false>, a.rows, a.n / 4, 0, stream, comm, p);
      }
    });
  } else {
    if (a.pushed) return false;
    bool ok = false;
    WEFT_DISPATCH_PRECISION(a.precision, {
      std::size_t shared = 0;
      ok = generic_shared<T>(a.n, a.residual == nullptr, &shared);
      if (ok) detail::launch(fused_kernel<T>, a.rows, kThreads, shared, stream, comm, p);
    });
    if (!ok) return false;
  }
  return true;
}

bool tp_fused_probe(const TpFusedGroup& g, std::size_t offset, std::uint64_t* pointers,
                    float* values, cudaStream_t stream) {
  if (g.dev_comm == nullptr || g.window == nullptr) return false;
  probe_kernel<<<1, 32, 0, stream>>>(*static_cast<const ncclDevComm*>(g.dev_comm),
                                     static_cast<ncclWindow_t>(g.window), barrier_of(g), offset,
                                     g.ranks, pointers, values);
  return true;
}

#else  // without NCCL 2.28's device headers

bool tp_fused_built() noexcept {
  return false;
}
std::size_t tp_fused_ll_bytes(int, int, int) noexcept {
  return 0;
}
bool tp_fused_enable_ll(TpFusedGroup&, void*, std::size_t, int, int) {
  return false;
}
bool tp_fused_enable_push(TpFusedGroup&, cudaStream_t) {
  return false;
}
int tp_fused_header_version() noexcept {
  return 0;
}
std::size_t tp_fused_dev_comm_bytes() noexcept {
  return 0;
}
bool allreduce_add_norm(const AllReduceNormArgs&, cudaStream_t) {
  return false;
}
bool tp_fused_probe(const TpFusedGroup&, std::size_t, std::uint64_t*, float*, cudaStream_t) {
  return false;
}

#endif

LlPush tp_fused_push(const TpFusedGroup& group) noexcept {
  LlPush push;
  if (group.ll_rows <= 0 || group.ll_epochs == nullptr || group.ranks < 2 ||
      group.ranks > kLlMaxRanks) {
    return push;
  }
  for (int r = 0; r < group.ranks; ++r) {
    if (r != group.rank && group.ll_area[r] == nullptr) return push;  // not enabled
    push.area[r] = group.ll_area[r];
  }
  push.epochs = group.ll_epochs;
  push.rank = group.rank;
  push.ranks = group.ranks;
  push.rows = group.ll_rows;
  push.width = group.ll_width;
  return push;
}

}  // namespace weft::cuda
