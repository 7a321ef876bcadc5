#pragma once
// The first operation of a step: token embedding rows, scaled, plus learned position rows.

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/vector_math.hpp"
#include "weft/tensor.hpp"

namespace weft::cpu {

// A [rows, width] table in f32, f16 or bf16.
struct EmbeddingTable {
  DType dtype = DType::kF32;
  const std::byte* data = nullptr;
  std::size_t rows = 0;
  std::size_t width = 0;
};

// out[t] = tokens_table[tokens[t]] * scale (+ positions_table[positions[t] + offset] when a
// position table is given: GPT-2's wpe, OPT's offset-2 table), fp32. Ids are checked by the
// caller. Gemma scales by sqrt(hidden); the product is in fp32 as transformers forms it for
// fp32 activations.
void embed_tokens(const EmbeddingTable& tokens_table, const std::int32_t* tokens,
                  std::size_t num_tokens, float scale, const EmbeddingTable* positions_table,
                  const std::int32_t* positions, std::size_t offset, float* out,
                  KernelPath path = KernelPath::kAuto);

}  // namespace weft::cpu
