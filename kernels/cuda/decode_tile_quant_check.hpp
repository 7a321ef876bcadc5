#pragma once
// Every one-byte element through the streaming decode kernel's conversion to its 16-bit mma type
// (decode_tile_quant.cuh), for the tests: the conversion must be exact, and a wrong element
// would hide inside an attention test's tolerance. Internal to kernels/cuda and its tests.

#include <cstdint>
#include <vector>

#include "kernels/cuda/paged_kv.hpp"

namespace weft::cuda::detail {

// The 16-bit bits (fp16 when `fp16`, else bf16) of each byte value 0..255 of `dtype` (int8 or
// fp8 e4m3) as the tile step converts it: [0, 256) as K is read (four bytes of one word),
// [256, 512) as V is read for the first of two keys and [512, 768) for the second (pairs
// gathered from two words; entry 512 + 4t + j is byte 4 (t ^ 1) + j). Empty on a CUDA error.
std::vector<std::uint16_t> convert_one_byte_elements(KvDtype dtype, bool fp16);

}  // namespace weft::cuda::detail
