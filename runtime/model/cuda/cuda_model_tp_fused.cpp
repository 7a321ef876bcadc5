// CudaModel under tensor parallelism, the fused all-reduce + residual add + norm
// (WEFT_TP_FUSED_NORM, docs/parallel.md "Fused all-reduce and norm"): the group's device
// window and barriers, and a check of them on this machine's NCCL before any step uses them.
// The launches themselves are in the forward pass (cuda_model_enqueue.cpp).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/model/cuda/cuda_model_state.hpp"
#include "runtime/parallel/communicator.hpp"
#include "weft/log.hpp"

namespace weft::model {
namespace {

// Steps of up to this many tokens take the LL exchange by default (WEFT_TP_FUSED_LL_ROWS) in
// groups of two ranks, and of four where the products push (four H200s, 8B batch 1: 1.97 ms
// with the pushes against 2.09 with the barrier, but 2.18 with the LL exchange and no pushes:
// the fused kernel's stores to three peers cost more than the barrier saves); other sizes keep
// the barrier until measured.
constexpr int kDefaultLlRows = 2;

// The row count in environment variable `name` (from `least` to 256), or `fallback` when it is
// unset or empty; the whole value must be the number (atoi took '8x' as 8).
Result<int> env_row_count(const char* name, int least, int fallback) {
  const char* r = std::getenv(name);
  if (r == nullptr || *r == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(r, &end, 10);
  if (*end != '\0' || v < least || v > 256) {
    return Error(ErrorCode::kInvalidArgument, std::string(name) + ": '" + r +
                                                  "' is not a row count in [" +
                                                  std::to_string(least) + ", 256]");
  }
  return static_cast<int>(v);
}

// A device allocation for the check, freed on every path.
struct Scratch {
  void* p = nullptr;
  ~Scratch() {
    if (p != nullptr) cudaFree(p);
  }
};

// Rank r's partial value at element i of row `row`, and the inputs of the check: small
// multiples of 1/32 (sums of two are exact; the norm's arithmetic is where rounding happens).
float partial_value(int r, int row, int i) {
  return static_cast<float>((i * 7 + row * 13 + r * 29) % 97 - 48) / 32.0f;
}
float residual_value(int row, int i) {
  return static_cast<float>((i * 5 + row * 3) % 31 - 15) / 8.0f;
}

// Waits for `stream` up to `seconds`. A fused kernel that never returns is stuck at its
// barrier (a rank missing, or a device API that does not do what this build expects): the
// GPU cannot be taken back from it, so the process ends here, saying why.
cudaError_t wait_or_abort(cudaStream_t stream, int seconds, const std::string& what) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (true) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e != cudaErrorNotReady) return e;
    if (std::chrono::steady_clock::now() > until) {
      log_error("tensor parallel fused norm: " + what + " did not finish in " +
                std::to_string(seconds) +
                " s (a fused kernel waits at its NCCL LSA barrier for a rank that never comes); "
                "aborting. Run with WEFT_TP_FUSED_NORM=0 to use NCCL's all-reduce instead.");
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Whether every rank of the group holds the same `values` (small integers): the sums over the
// group of each value and of its square are the group's size times this rank's (equal sums
// alone would let 0, 16, 32 on three ranks pass on the rank with 16; with the squares they
// pass only when the values do not vary), through a device all-reduce on `stream`.
Result<bool> same_on_every_rank(parallel::Communicator& comm, cudaStream_t stream,
                                std::vector<float> values) {
  const std::size_t count = values.size();
  for (std::size_t i = 0; i < count; ++i)
    values.push_back(values[i] * values[i]);
  Scratch sums;
  const std::size_t bytes = values.size() * 4;
  std::vector<float> got(values.size());
  if (auto e = cudaMalloc(&sums.p, bytes); e != cudaSuccess) {
    return cuda_error(e, "allocating the fused norm's vote");
  }
  auto* dev = static_cast<float*>(sums.p);
  if (auto e = cudaMemcpy(dev, values.data(), bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return cuda_error(e, "the fused norm's vote");
  }
  if (auto ok = comm.all_reduce_sum(std::span<float>(dev, values.size())); !ok) return ok.error();
  if (auto e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return cuda_error(e, "the fused norm's vote");
  }
  if (auto e = cudaMemcpy(got.data(), dev, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return cuda_error(e, "the fused norm's vote");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (got[i] != values[i] * static_cast<float>(comm.size())) return false;
  }
  return true;
}

// The check of the window and barriers before any step uses them, in phases that each end
// with a vote of the group (agree), so that no rank goes on to a barrier that another rank,
// having failed, will never reach. Each phase returns why it failed on this rank, or "".
class FusedNormCheck {
 public:
  FusedNormCheck(CudaModel::State& s, parallel::Communicator& comm)
      : s_(s),
        comm_(comm),
        rank_(comm.rank()),
        ranks_(comm.size()),
        H_(s.spec.hidden_size),
        rows_(s.tp_fused_rows),
        n_(static_cast<std::size_t>(rows_) * H_) {}

  // Whether every rank says `ok`: a float all-reduce over the group, on the device. A failed
  // vote counts as a no.
  bool agree(bool ok) {
    if (vote_.p == nullptr && cudaMalloc(&vote_.p, 4) != cudaSuccess) return false;
    auto* vote = static_cast<float*>(vote_.p);
    const float mine = ok ? 1.0f : 0.0f;
    float votes = 0;
    return cudaMemcpy(vote, &mine, 4, cudaMemcpyHostToDevice) == cudaSuccess &&
           comm_.all_reduce_sum(std::span<float>(vote, 1)) &&
           cudaStreamSynchronize(s_.stream) == cudaSuccess &&
           cudaMemcpy(&votes, vote, 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
           votes == static_cast<float>(ranks_);
  }

  // 1. This rank's marker (1000 + rank) at the start of its window.
  std::string write_marker() {
    const float mark = 1000.0f + static_cast<float>(rank_);
    if (auto e = cudaMemcpy(s_.tp_fused_base, &mark, 4, cudaMemcpyHostToDevice); e != cudaSuccess) {
      return failed("cudaMemcpy", e);
    }
    // A copy from pageable memory may return before its DMA lands: wait for it before the
    // other ranks read.
    if (auto e = cudaDeviceSynchronize(); e != cudaSuccess)
      return failed("cudaDeviceSynchronize", e);
    return {};
  }

  // 2. The probe: the window's pointers as the device computes them, and every rank's marker
  // read through its load/store pointer.
  std::string probe() {
    Scratch probe;
    const std::size_t bytes = (static_cast<std::size_t>(ranks_) + 3) * 8 + ranks_ * 4;
    if (auto e = cudaMalloc(&probe.p, bytes); e != cudaSuccess) return failed("cudaMalloc", e);
    auto* pointers = static_cast<std::uint64_t*>(probe.p);
    auto* values = reinterpret_cast<float*>(pointers + ranks_ + 3);
    if (!cuda::tp_fused_probe(s_.tp_fused, 0, pointers, values, s_.stream)) {
      return "this build has no fused kernels";
    }
    if (auto e = cudaStreamSynchronize(s_.stream); e != cudaSuccess) {
      return failed("the probe kernel", e);
    }
    std::vector<std::uint64_t> got_pointers(static_cast<std::size_t>(ranks_) + 3);
    std::vector<float> got_values(static_cast<std::size_t>(ranks_));
    cudaMemcpy(got_pointers.data(), pointers, got_pointers.size() * 8, cudaMemcpyDeviceToHost);
    if (auto e =
            cudaMemcpy(got_values.data(), values, got_values.size() * 4, cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return failed("cudaMemcpy", e);
    }
    // The window's load/store pointers are NCCL's own mapping of the memory (its flat LSA
    // range), not the address ncclMemAlloc returned (measured on two H200s, NCCL 2.28.3): the
    // local and own load/store pointers must agree, and the markers below, written through
    // ncclMemAlloc's address and read through the load/store pointers, show they alias it.
    if (got_pointers[0] == 0 || got_pointers[0] != got_pointers[1 + rank_]) {
      return "the window's device pointers disagree (local " + std::to_string(got_pointers[0]) +
             ", own load/store " + std::to_string(got_pointers[1 + rank_]) + ")";
    }
    if (got_pointers[1 + ranks_] == 0 || got_pointers[2 + ranks_] != 1) {
      return "the device communicator's resource window is not what the device sees";
    }
    for (int r = 0; r < ranks_; ++r) {
      if (got_values[r] != 1000.0f + static_cast<float>(r)) {
        return "rank " + std::to_string(r) + "'s window reads " + std::to_string(got_values[r]) +
               " through its load/store pointer, expected " + std::to_string(1000 + r);
      }
    }
    return {};
  }

  // 3. Known rows: this rank's partial rows in both slots, the same residual twice (fused
  // and reference), a weight.
  std::string prepare() {
    std::vector<float> partial(n_), residual(n_), weight(static_cast<std::size_t>(H_));
    for (int row = 0; row < rows_; ++row) {
      for (int i = 0; i < H_; ++i) {
        partial[static_cast<std::size_t>(row) * H_ + i] = partial_value(rank_, row, i);
        residual[static_cast<std::size_t>(row) * H_ + i] = residual_value(row, i);
      }
    }
    for (int i = 0; i < H_; ++i)
      weight[i] = 1.0f + static_cast<float>(i % 7) / 16.0f;
    // plain (all-reduced by NCCL), residual x2, sum x2, weight; then out x2 (16-bit)
    const std::size_t floats = 5 * n_ + static_cast<std::size_t>(H_);
    if (auto e = cudaMalloc(&buffers_.p, floats * 4 + 2 * n_ * cuda::kHalfBytes);
        e != cudaSuccess) {
      return failed("cudaMalloc", e);
    }
    plain_ = static_cast<float*>(buffers_.p);
    res_fused_ = plain_ + n_;
    res_ref_ = res_fused_ + n_;
    sum_fused_ = res_ref_ + n_;
    sum_ref_ = sum_fused_ + n_;
    weight_ = sum_ref_ + n_;
    out_fused_ = reinterpret_cast<std::uint16_t*>(weight_ + H_);
    out_ref_ = out_fused_ + n_;
    char* base = reinterpret_cast<char*>(s_.tp_fused_base);
    for (int slot : {0, 1}) {
      cudaMemcpy(base + slot * s_.tp_fused_slot_bytes, partial.data(), n_ * 4,
                 cudaMemcpyHostToDevice);
    }
    cudaMemcpy(plain_, partial.data(), n_ * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(res_fused_, residual.data(), n_ * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(res_ref_, residual.data(), n_ * 4, cudaMemcpyHostToDevice);
    if (auto e = cudaMemcpy(weight_, weight.data(), H_ * 4, cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return failed("cudaMemcpy", e);
    }
    if (auto e = cudaDeviceSynchronize(); e != cudaSuccess)
      return failed("cudaDeviceSynchronize", e);
    return {};
  }

  // 4. The fused kernel on every row (slot 0), on one row (slot 1), and the sum alone (slot
  // 0), against NCCL's all-reduce of the same rows and add_norm. Every rank that voted yes
  // after prepare() launches the same kernels (their arguments are the same everywhere).
  std::string compare() {
    const cuda::Precision P = s_.options.precision;
    const auto kind = s_.spec.norm == Norm::kRms ? cuda::NormKind::kRms : cuda::NormKind::kLayer;
    cuda::AllReduceNormArgs a;
    a.group = s_.tp_fused;
    a.rows = rows_;
    a.n = H_;
    a.residual = res_fused_;
    a.kind = kind;
    a.weight = weight_;
    a.eps = 1e-5f;
    a.out = out_fused_;
    a.precision = P;
    bool launched = cuda::allreduce_add_norm(a, s_.stream);
    a.offset = s_.tp_fused_slot_bytes;  // one row in the other slot, as a step's next launch
    a.rows = 1;
    launched = launched && cuda::allreduce_add_norm(a, s_.stream);
    cuda::AllReduceNormArgs sum = a;
    sum.offset = 0;
    sum.rows = rows_;
    sum.residual = nullptr;
    sum.sum_out = sum_fused_;
    launched = launched && cuda::allreduce_add_norm(sum, s_.stream);
    if (!launched) return "the fused kernel refused the check's arguments";
    if (auto e = wait_or_abort(s_.stream, 30, "the check of the fused kernel"); e != cudaSuccess) {
      return failed("the fused kernel", e);
    }
    // The reference: NCCL's sum, then add_norm on every row and again on the first.
    if (auto ok = comm_.all_reduce_sum(std::span<float>(plain_, n_)); !ok) {
      return std::string("the reference all-reduce: ") + ok.error().what();
    }
    cudaMemcpyAsync(sum_ref_, plain_, n_ * 4, cudaMemcpyDeviceToDevice, s_.stream);
    cuda::AddNormArgs r;
    r.residual = res_ref_;
    r.delta = plain_;
    r.rows = rows_;
    r.n = H_;
    r.kind = kind;
    r.weight = weight_;
    r.eps = 1e-5f;
    r.out = out_ref_;
    r.precision = P;
    cuda::add_norm(r, s_.stream);
    r.rows = 1;
    cuda::add_norm(r, s_.stream);
    if (auto e = cudaStreamSynchronize(s_.stream); e != cudaSuccess) {
      return failed("the reference", e);
    }
    std::vector<float> a_res(n_), b_res(n_), a_sum(n_), b_sum(n_);
    std::vector<std::uint16_t> a_out(n_), b_out(n_);
    cudaMemcpy(a_res.data(), res_fused_, n_ * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(b_res.data(), res_ref_, n_ * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(a_sum.data(), sum_fused_, n_ * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(b_sum.data(), sum_ref_, n_ * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(a_out.data(), out_fused_, n_ * 2, cudaMemcpyDeviceToHost);
    if (auto e = cudaMemcpy(b_out.data(), out_ref_, n_ * 2, cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return failed("cudaMemcpy", e);
    }
    // The partial values' sums are exact in any order (NCCL's order differs from the kernel's
    // beyond two ranks), so the sums and the residuals must be bitwise the same. The
    // normalized 16-bit rows are allowed one unit in the last place: the two kernels are
    // compiled apart, and the compiler may contract a multiply and an add into one FMA in one
    // and not the other.
    for (std::size_t i = 0; i < n_; ++i) {
      const int ulps = std::abs(static_cast<int>(a_out[i]) - static_cast<int>(b_out[i]));
      if (a_sum[i] != b_sum[i] || a_res[i] != b_res[i] || ulps > 1) {
        return "the fused kernel's results differ from NCCL's all-reduce and add_norm at row " +
               std::to_string(i / H_) + ", element " + std::to_string(i % H_) + " (sum " +
               std::to_string(a_sum[i]) + " vs " + std::to_string(b_sum[i]) + ", residual " +
               std::to_string(a_res[i]) + " vs " + std::to_string(b_res[i]) + ", output bits " +
               std::to_string(a_out[i]) + " vs " + std::to_string(b_out[i]) + ")";
      }
    }
    return {};
  }

 private:
  static std::string failed(const char* call, cudaError_t e) {
    return std::string(call) + ": " + cudaGetErrorString(e);
  }

  CudaModel::State& s_;
  parallel::Communicator& comm_;
  const int rank_, ranks_, H_, rows_;
  const std::size_t n_;
  Scratch vote_, buffers_;
  float *plain_ = nullptr, *res_fused_ = nullptr, *res_ref_ = nullptr, *sum_fused_ = nullptr,
        *sum_ref_ = nullptr, *weight_ = nullptr;
  std::uint16_t *out_fused_ = nullptr, *out_ref_ = nullptr;
};

}  // namespace

Result<CudaModel::State::FusedNormSwitches> CudaModel::State::fused_norm_switches(
    parallel::Communicator& comm) {
  const char* knob = std::getenv("WEFT_TP_FUSED_NORM");
  const std::string asked = knob != nullptr ? knob : "";
  if (asked != "" && asked != "0" && asked != "1") {
    return Error(ErrorCode::kInvalidArgument,
                 "WEFT_TP_FUSED_NORM: '" + asked + "' is not 0 (NCCL's all-reduce) or 1 (fused)");
  }
  FusedNormSwitches on;
  // Unset: on for groups of two and four ranks, where it was measured (two H200s: the 8B
  // batch-1 step 3.86 -> 3.36 ms; four H200s: 2.96 -> 2.63 ms; every fixture's tests passing
  // on both), off for other sizes until measured there (docs/parallel.md).
  on.fused = asked == "1" || (asked.empty() && (comm.size() == 2 || comm.size() == 4));
  auto rows = env_row_count("WEFT_TP_FUSED_ROWS", 1, comm.size() == 2 ? 256 : 64);
  if (!rows) return rows.error();
  on.rows = *rows;
  const char* push = std::getenv("WEFT_TP_FUSED_PUSH");
  const std::string push_asked = push != nullptr ? push : "";
  if (push_asked != "" && push_asked != "0" && push_asked != "1") {
    return Error(ErrorCode::kInvalidArgument,
                 "WEFT_TP_FUSED_PUSH: '" + push_asked +
                     "' is not 0 (the fused kernel pushes) or 1 (the products push)");
  }
  on.push = push_asked != "0";
  const bool ll_default = comm.size() == 2 || (comm.size() == 4 && on.push);
  auto ll_rows = env_row_count("WEFT_TP_FUSED_LL_ROWS", 0, ll_default ? kDefaultLlRows : 0);
  if (!ll_rows) return ll_rows.error();
  on.ll_rows = std::min(on.rows, *ll_rows);
  // join_fused_norm is collective only if every rank reads the same switches (mpirun -x): the
  // group compares them first, so that a rank without them fails with the reason instead of
  // leaving the others waiting in a collective it never joins.
  auto same = same_on_every_rank(comm, stream,
                                 {on.fused ? 1.0f : 0.0f, static_cast<float>(on.rows),
                                  static_cast<float>(on.ll_rows), on.push ? 1.0f : 0.0f});
  if (!same) return same.error();
  if (!*same) {
    return Error(ErrorCode::kInvalidArgument,
                 "WEFT_TP_FUSED_NORM, WEFT_TP_FUSED_ROWS, WEFT_TP_FUSED_LL_ROWS or "
                 "WEFT_TP_FUSED_PUSH differ across "
                 "the tensor-parallel ranks (this rank: '" +
                     asked + "', " + std::to_string(on.rows) + " rows, " +
                     std::to_string(on.ll_rows) +
                     " LL rows): give every rank the same (mpirun -x WEFT_TP_FUSED_NORM ...)");
  }
  return on;
}

Result<void> CudaModel::State::join_fused_norm(parallel::Communicator& comm,
                                               const FusedNormSwitches& switches) {
  tp_fused = {};
  tp_push = {};
  tp_fused_rows = 0;
  tp_fused_slot_bytes = 0;
  tp_fused_base = nullptr;
  int rows = switches.rows;
  const bool on = switches.fused;
  if (!on) {
    tp_fused_note =
        "off (WEFT_TP_FUSED_NORM=1 turns it on; the default for groups of two and four ranks)";
    return {};
  }
  // Every rank decides the same from the spec, the environment and the build, so the ranks
  // either all ask the communicator (collective) or none does.
  if (spec.norm_placement == NormPlacement::kPost || spec.parallel_attention) {
    tp_fused_note =
        "off: pre-norm sequential layers only (this model is post-norm or runs "
        "attention and MLP in parallel)";
    return {};
  }
  if (!cuda::tp_fused_built()) {
    tp_fused_note = "off: this build has no NCCL 2.28 device headers (nccl_device.h)";
    return {};
  }
  if (comm.size() > 8) {
    tp_fused_note = "off: more than 8 ranks";
    return {};
  }
  rows = std::min(rows, std::max(1, capacity_tokens));
  const std::size_t slot =
      (static_cast<std::size_t>(rows) * spec.hidden_size * 4 + 4095) / 4096 * 4096;
  // The LL exchange serves the float4 kernel's rows (hidden % 128 == 0, at most 4096).
  const int H = spec.hidden_size;
  const int ll_rows = H % 128 == 0 && H <= 4096 ? std::min(rows, switches.ll_rows) : 0;
  const std::size_t ll_bytes = ll_rows > 0 ? cuda::tp_fused_ll_bytes(comm.size(), ll_rows, H) : 0;
  auto window = comm.device_window(2 * slot + ll_bytes, rows);
  if (!window) {
    tp_fused_note = std::string("off: ") + window.error().what();
    log_warn("tensor parallel fused norm " + tp_fused_note);
    return {};
  }
  tp_fused.dev_comm = window->dev_comm;
  tp_fused.window = window->window;
  tp_fused.barrier_buffer = window->barrier_buffer;
  tp_fused.barriers = window->barriers;
  tp_fused.rank = comm.rank();
  tp_fused.ranks = comm.size();
  tp_fused_rows = std::min(rows, window->barriers);
  tp_fused_slot_bytes = slot;
  tp_fused_base = static_cast<float*>(window->data);
  if (ll_bytes > 0) {
    // The receive area after the two slots, zeroed. Every rank must take the same path for a
    // launch: a rank whose area failed to clear makes the whole group keep the barrier.
    cuda::tp_fused_enable_ll(tp_fused, window->data, 2 * slot, ll_rows, H);
    auto same_ll = same_on_every_rank(comm, stream, {static_cast<float>(tp_fused.ll_rows)});
    if (!same_ll || !*same_ll) {
      tp_fused.ll_rows = 0;
      tp_fused.ll_epochs = nullptr;
    }
  }
  // Products push into the LL exchange where this rank found every peer's area (a rank that
  // did not leaves the pushes to its fused kernel: the peers wait for the same lines).
  if (tp_fused.ll_rows > 0 && switches.push && cuda::tp_fused_enable_push(tp_fused, stream)) {
    tp_push = cuda::tp_fused_push(tp_fused);
  }
  // The check, phase by phase, each ending in a vote (FusedNormCheck).
  FusedNormCheck check(*this, comm);
  std::string why = check.write_marker();
  const char* phase = "writing the markers";
  bool ok = check.agree(why.empty());
  if (ok) {
    phase = "the probe";
    why = check.probe();
    ok = check.agree(why.empty());
  }
  if (ok) {
    phase = "preparing the rows";
    why = check.prepare();
    ok = check.agree(why.empty());
  }
  if (ok) {
    phase = "the fused kernel against NCCL's all-reduce and add_norm";
    why = check.compare();
    ok = check.agree(why.empty());
  }
  if (!ok) {
    tp_fused_note = std::string("off: the check on this machine failed at ") + phase + " (" +
                    (why.empty() ? "on another rank" : why) + ")";
    log_error("tensor parallel fused norm " + tp_fused_note + "; " + window->description);
    tp_fused = {};
    tp_push = {};
    tp_fused_rows = 0;
    return {};
  }
  tp_fused_note =
      "on for steps of up to " + std::to_string(tp_fused_rows) + " tokens" +
      (tp_fused.ll_rows > 0 ? " (the LL exchange up to " + std::to_string(tp_fused.ll_rows) +
                                  (tp_push.ranks > 0 ? ", pushed by the products" : "") + ")"
                            : "") +
      ": " + window->description;
  if (comm.rank() == 0) log_info("tensor parallel fused norm " + tp_fused_note);
  return {};
}

}  // namespace weft::model
