#pragma once
// The L2 prefetch switches of a step (cuda_model_enqueue.cpp), read from the environment once.
//
// Decode steps of up to 64 tokens are latency-bound between their products: while the small
// kernels run, a side stream asks L2 to fetch the first 8 MB of the next product's weights
// (kernels/cuda/l2_prefetch.hpp; 8 MB measured best on the H100, docs/cuda.md). For
// comparisons, WEFT_L2_PREFETCH_MB sets the MB per range (0: off): one number, or four (qkv
// and lm_head, o, gate_up, down); WEFT_L2_PREFETCH_TOKENS the largest step that prefetches.
// Quantized matrices read by the few-token products are not prefetched (WEFT_L2_PREFETCH_QUANT_MB,
// default 0, MB per range for them): their kernels read HBM at 85-97% of its copy rate at one
// token, and a side stream reading the next matrix meanwhile made the 8B q4 batch-1 step slower
// (2.26 ms without, 2.40-2.42 with 8 MB, 2.60 with 16 MB on an H100; docs/PERFORMANCE.md,
// "Rounded inputs in the one-token q4 product").
// One exception, WEFT_L2_AHEAD_QUANT_MB (MB, default 16; 0: off): while a step whose norms run
// inside the dp4a products (1-2 tokens on one GPU) runs its attention (a few dozen blocks;
// memory otherwise idle but for the o product's first tiles), the side stream fetches the
// first rows of the gated gate_up matrix, gate and up rows alike, which the product after o
// then finds in L2: 8B q4_b64 batch-1 step 2.167-2.170 -> 2.140-2.144 ms on an H100 (8 MB:
// 2.148-2.182, 24 MB: 2.164-2.172), 2.195 -> 2.126-2.135 in another call (docs/PERFORMANCE.md,
// "Where a q4 batch-1 step's time goes").
//
// Tensor parallel (docs/parallel.md): the prefetches that run beside an all-reduce (gate_up's
// beside o's, the next layer's qkv or the head's beside down's) have the all-reduce's latency
// to fill, memory otherwise idle: WEFT_TP_PREFETCH_MB per range (default 16; 0: the
// single-GPU caps). WEFT_TP_OVERLAP=0 forks the next qkv's prefetch after down's all-reduce
// (the single-GPU order), for comparisons.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace weft::model {

struct PrefetchSwitches {
  enum Range { kQkvOrHead, kO, kGateUp, kDown };
  std::array<std::size_t, 4> cap{};  // bytes per range
  std::size_t tp_cap = 0;            // bytes, beside an all-reduce
  std::size_t quant_cap = 0;         // bytes per range of a quantized matrix
  std::size_t quant_ahead = 0;       // bytes of gate_up fetched during the attention
  bool tp_overlap = true;
  int tokens = 64;  // the largest step that prefetches

  static const PrefetchSwitches& get() {
    static const PrefetchSwitches s = read();
    return s;
  }

 private:
  static PrefetchSwitches read() {
    PrefetchSwitches s;
    std::array<std::size_t, 4> mb{8, 8, 8, 8};
    if (const char* v = std::getenv("WEFT_L2_PREFETCH_MB")) {
      int got[4] = {0, 0, 0, 0};
      const int n = std::sscanf(v, "%d,%d,%d,%d", &got[0], &got[1], &got[2], &got[3]);
      for (int k = 0; k < 4; ++k)
        mb[k] = static_cast<std::size_t>(std::max(0, got[n == 4 ? k : 0]));
    }
    for (int k = 0; k < 4; ++k)
      s.cap[static_cast<std::size_t>(k)] = mb[static_cast<std::size_t>(k)] << 20;
    const char* tp = std::getenv("WEFT_TP_PREFETCH_MB");
    s.tp_cap = static_cast<std::size_t>(std::max(0, tp != nullptr ? std::atoi(tp) : 16)) << 20;
    const char* overlap = std::getenv("WEFT_TP_OVERLAP");
    s.tp_overlap = overlap == nullptr || std::strcmp(overlap, "0") != 0;
    const char* quant = std::getenv("WEFT_L2_PREFETCH_QUANT_MB");
    s.quant_cap = static_cast<std::size_t>(std::max(0, quant != nullptr ? std::atoi(quant) : 0))
                  << 20;
    const char* ahead = std::getenv("WEFT_L2_AHEAD_QUANT_MB");
    s.quant_ahead = static_cast<std::size_t>(std::max(0, ahead != nullptr ? std::atoi(ahead) : 16))
                    << 20;
    const char* tokens = std::getenv("WEFT_L2_PREFETCH_TOKENS");
    s.tokens = tokens != nullptr ? std::atoi(tokens) : 64;
    return s;
  }
};

}  // namespace weft::model
