#pragma once
// A row-parallel product that pushes its own rows into the LL exchange of the fused
// all-reduce + norm after it (tp_fused.hpp, docs/parallel.md "Fused all-reduce and norm").
//
// The fused kernel's LL exchange stores each rank's partial rows, flagged with the launch's
// epoch, into the peers' receive areas, then waits for theirs. When the product before it does
// that store itself, from each warp as its outputs are ready, the peers' rows are on their way
// while the product still runs, and the fused kernel (AllReduceNormArgs::pushed) only waits
// for them: the store and its trip over NVLink leave the chain of kernels of a layer.

#include <cstddef>

namespace weft::cuda {

inline constexpr int kLlMaxRanks = 8;

// What a product needs to push (tp_fused_push builds it from the group): every rank's LL
// receive area as this GPU addresses it (ncclGetLsaPointer; area[rank] is never written),
// this rank's epoch counters, and the area's shape (TpFusedGroup's ll_rows and ll_width). A
// product pushes rows t < rows of its outputs o < width, as the next launch of the fused kernel
// with the same counters will read them.
struct LlPush {
  char* area[kLlMaxRanks] = {};
  const unsigned* epochs = nullptr;
  int rank = 0;
  int ranks = 0;
  int rows = 0;
  int width = 0;

  // Whether a product of `tokens` rows of `outputs` values can push: pairs of outputs make
  // a line, so `outputs` must be even (and gemv's warps take 2 or 4 rows: a multiple of 4).
  bool takes(int tokens, int outputs) const noexcept {
    return ranks > 1 && ranks <= kLlMaxRanks && epochs != nullptr && tokens >= 1 &&
           tokens <= rows && outputs % 4 == 0 && outputs <= width;
  }
};

}  // namespace weft::cuda
