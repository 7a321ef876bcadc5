#pragma once
// Truncation of the next-token distribution, over a list of candidate tokens that already
// holds every token that can survive (the sampler builds it without sorting the vocabulary).
// Applied in Hugging Face's warper order: top-k (by the caller, a threshold), top-p, min-p,
// typical-p. Each filter acts on the distribution the previous one left, renormalised.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"

namespace weft::sampling {

// weight: exp((logit - max) / temperature), an unnormalised probability.
// key: the order a filter ranks by (lower first); ties go to the lower id.
struct Candidate {
  float key;
  float weight;
  std::int32_t id;
};

// Rearranges `c` so that its first `count` entries are the shortest prefix, in (key, id)
// order, whose weights sum to at least `target`, and returns count (c.size() when the whole
// list falls short). The prefix itself is left unordered. Expected linear time (quickselect
// that carries the mass of the part it discards) instead of sorting the list.
std::size_t select_mass_prefix(std::span<Candidate> c, double target);

// Applies tail-free sampling, top-p, min-p and typical-p to `c`, whose weights are those of
// the top-k set (or of every token when top-k is off) restricted to possible survivors;
// `total_weight` is the sum over that whole set, including tokens not in `c`. A token absent
// from `c` must be one that top-p or min-p removes; with tail-free sampling on, `c` must hold
// the whole set. Keeps at least one token. Keys are overwritten.
void truncate(std::vector<Candidate>& c, double total_weight, const SamplingParams& params);

// Mirostat's truncation (Basu et al. 2021, "Mirostat: a neural text decoding algorithm that
// directly controls perplexity") of `c`, which holds every token of nonzero weight, at the
// sequence's current target mu (bits), over a vocabulary of `vocab` tokens:
//   mode 1: estimate the Zipf exponent s from the 100 most likely tokens (least squares of
//           log(p_i / p_i+1) on log((i + 2) / (i + 1))), then keep the top
//           k = ((e * 2^mu) / (1 - vocab^-e))^(1 / s) tokens, e = s - 1;
//   mode 2: keep the tokens whose surprise -log2 p is at most mu.
// At least one token is kept. Leaves `c` sorted most likely first (lower id on ties).
void mirostat_truncate(std::vector<Candidate>& c, int mode, double mu, int vocab);

}  // namespace weft::sampling
