#pragma once
// ALiBi (Press et al. 2022, "Train Short, Test Long"): attention adds slope_h * (j - i) to the
// score of query position i for key position j, instead of rotating q and k.

#include <vector>

namespace weft::model {

// The per-head slopes: a geometric sequence starting at 2^(-8 / n) for the largest power of
// two n <= num_heads, and for the heads beyond it every other slope of the sequence for 2n
// (the BLOOM / transformers build_alibi_tensor recipe), in fp32 as torch computes them.
std::vector<float> alibi_slopes(int num_heads);

}  // namespace weft::model
