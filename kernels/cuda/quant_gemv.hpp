#pragma once
// Dequantize-fused products of few tokens (batch-1 and small-batch decode) against
// block-quantized weights, every format of docs/quantization.md, in the GPU layout of
// quant_layout.hpp: y[t, o] = sum_k x[t, k] * w'[o, k], w' = min + q * scale, without
// materialising w'. The weights are read once for all tokens. And the dequantization of a
// range of rows into a 16-bit matrix, for larger steps (prefill) through cuBLAS.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/precision.hpp"
#include "kernels/cuda/quant_layout.hpp"

namespace weft::cuda {

inline constexpr int kQuantGemvMaxTokens = 8;

// A quantized matrix on the device: one allocation holding the codes, then the headers
// (quant_matrix_layout(format, rows, cols)).
struct QuantMatrixView {
  const void* data = nullptr;
  QuantGemvFormat format{};
  int rows = 0, cols = 0;
};

// Whether quant_gemv takes these operands: 1..kQuantGemvMaxTokens tokens, cols a multiple of
// 64, x and the matrix 16-byte aligned.
inline bool quant_gemv_supported(const void* x, int tokens, const QuantMatrixView& w) {
  return tokens >= 1 && tokens <= kQuantGemvMaxTokens && w.data != nullptr &&
         quant_layout_supported(static_cast<std::size_t>(w.cols)) &&
         reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
}

// The product's kernels (docs/quantization.md, "On the GPU"), same results up to the order
// of fp32 additions:
// - kLanes: CUDA cores; a lane per group of 32 units, 4 rows per thread block (2 from 5
//   tokens), codes turned into fp32 and multiplied with fp32 FMAs. Every format.
// - kMma: tensor cores (mma.sync m16n8k16); a warp per 16-row tile and slice of the columns,
//   codes exact as 16-bit numbers, sum(q * x) and sum(x) per block in fp32, then scale and
//   min per block. Every format.
// - kStream: the mma kernel's arithmetic in persistent thread blocks (two per multiprocessor,
//   each walking its share of the 16-row tiles) whose warps keep several chunks of code words
//   in flight while they compute (quant_gemv_stream.cu). The formats of
//   quant_gemv_stream_supported (q4 and q8); asked for another format, it runs lanes.
// - kDp4a: q4_b32 and q4_b64 at 1-2 tokens: the lanes schedule with x rounded to 8-bit
//   integers (one scale per 32 inputs) and the products summed by dp4a (quant_gemv_dp4a.cu).
//   Not the same sums: a row's error is at most sum |q * scale| * s / 2 over its groups (s:
//   the group's max |x| / 127). Asked for another format or more tokens, it runs what kAuto
//   runs there.
// - kAuto: per call, from the format and the token count (quant_gemv_resolve): dp4a for q4 at
//   1-2 tokens, else lanes at 1-2 tokens; at 3-8 stream where it supports the format, else mma.
enum class QuantGemvKernel { kLanes, kMma, kStream, kAuto, kDp4a };
inline const char* quant_gemv_kernel_name(QuantGemvKernel k) {
  switch (k) {
    case QuantGemvKernel::kLanes:
      return "lanes";
    case QuantGemvKernel::kMma:
      return "mma";
    case QuantGemvKernel::kStream:
      return "stream";
    case QuantGemvKernel::kAuto:
      return "auto";
    case QuantGemvKernel::kDp4a:
      return "dp4a";
  }
  return "?";
}

// The kernel named `name` (lanes, mma, stream, dp4a, auto); false if none is.
bool quant_gemv_kernel_from_name(const char* name, QuantGemvKernel& out);

// The kernel quant_gemv runs for a pass of `tokens` tokens: WEFT_QUANT_GEMV=K (K at every
// token count) or K1/K2 (K1 at 1-2 tokens, K2 at 3-8), each lanes, mma, stream, dp4a or auto; read
// once (default auto; another value is reported on stderr and the default kept).
QuantGemvKernel quant_gemv_default_kernel(int tokens = 1);
// Parses a WEFT_QUANT_GEMV value into the kernels for 1-2 and 3-8 tokens; false if malformed.
bool quant_gemv_parse_kernels(const char* value, QuantGemvKernel& small, QuantGemvKernel& large);

// Whether the stream kernel has the format (q4_b32, q4_b64, q8_b32, q8_b64).
bool quant_gemv_stream_supported(QuantGemvFormat format);

// The kernel that runs when `kernel` is asked for at this format and token count: kAuto and
// kStream and kDp4a become a concrete kernel as described above; lanes and mma stay themselves.
QuantGemvKernel quant_gemv_resolve(QuantGemvKernel kernel, QuantGemvFormat format, int tokens);

// x is [tokens, w.cols] in `precision`, y [tokens, w.rows] fp32 with row stride ldy. Through
// quant_gemv_default_kernel(tokens), or the kernel named.
void quant_gemv(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                Precision precision, cudaStream_t stream);
void quant_gemv(QuantGemvKernel kernel, const void* x, int tokens, const QuantMatrixView& w,
                float* y, int ldy, Precision precision, cudaStream_t stream);

// The tensor-core kernel (what quant_gemv runs for kMma); in quant_gemv_mma.cu.
void quant_gemv_mma(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                    Precision precision, cudaStream_t stream);
// Its gate_up product with the activation (what quant_gemv_gated runs for kMma).
void quant_gemv_mma_gated(ActivationKind kind, const void* x, int tokens, const QuantMatrixView& w,
                          void* out, Precision precision, cudaStream_t stream);
// The stream kernel (kStream), for formats of quant_gemv_stream_supported only; in
// quant_gemv_stream.cu. With act >= 0 (an ActivationKind) w is a fused gate_up matrix and
// act_out receives act(gate) * up, as quant_gemv_gated writes it; y is then unused.
void quant_gemv_stream(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                       int act, void* act_out, Precision precision, cudaStream_t stream);

// The dp4a kernel (kDp4a) where quant_gemv_dp4a_supported; in quant_gemv_dp4a.cu. With act >= 0
// w is a fused gate_up matrix and act_out receives act(gate) * up (as quant_gemv_stream).
bool quant_gemv_dp4a_supported(QuantGemvFormat format, int tokens);
// A residual add and RMS norm fused into two dp4a products (pre-norm decode at 1-2 tokens on one
// GPU; docs/quantization.md, "Norms inside the products"): the producer (o, down:
// quant_gemv_dp4a_norm_out, w.rows == the hidden size) adds its rows into the residual stream,
// writes residual * weight as 16 bits into `scaled` and each thread block's sum of the squared
// residual rows into out_squares ([tokens][quant_norm_squares(w.rows)]); the consumer (qkv,
// gate_up: quant_gemv_dp4a_norm_in) reads `scaled` as its x and multiplies its sums by
// 1 / sqrt(sum of squares / n + eps), the producer's sums added in a fixed order: what add_norm
// and the product did, without the add_norm kernel (its h, (x / rms) * weight rounded to 16
// bits, becomes x * weight rounded, then scaled by 1 / rms in fp32).
struct QuantNormArgs {
  float* residual = nullptr;          // producer: [tokens][w.rows] fp32, updated in place
  const float* weight = nullptr;      // producer: [w.rows], the next norm's weight
  void* scaled = nullptr;             // producer: [tokens][w.rows] 16-bit, residual * weight
  float* out_squares = nullptr;       // producer: [tokens][quant_norm_squares(w.rows)]
  const float* in_squares = nullptr;  // consumer: the producer's out_squares
  int count = 0;                      // consumer: quant_norm_squares(n)
  int n = 0;                          // consumer: the hidden size
  float eps = 0.0f;                   // consumer: the norm's epsilon
};
// Thread blocks (sums of squares per token) of a norm-out product of `rows` rows.
int quant_norm_squares(int rows);
void quant_gemv_dp4a_norm_out(const void* x, int tokens, const QuantMatrixView& w,
                              const QuantNormArgs& norm, Precision precision, cudaStream_t stream);
void quant_gemv_dp4a_norm_in(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                             int act, void* act_out, const QuantNormArgs& norm, Precision precision,
                             cudaStream_t stream);
// Whether it also rounds the inputs' remainders x - s * xq on the scale s / 254 and sums them
// (two more dp4a a code word): x is then carried to within s / 508 instead of s / 2.
// WEFT_QUANT_DP4A_FINE=1 turns it on (read once; off by default: 5-10% slower 8B steps).
bool quant_gemv_dp4a_fine();
void quant_gemv_dp4a(const void* x, int tokens, const QuantMatrixView& w, float* y, int ldy,
                     int act, void* act_out, Precision precision, cudaStream_t stream);
// The dp4a product at 3-8 tokens (q4 formats): x rounded once into a buffer of
// quant_rounded_inputs_bytes(tokens, cols) bytes by quant_round_inputs (per token and group of
// 32 inputs what the 1-2 token kernels compute in every block: 8-bit codes on the group's own
// scale, the scale and the exact sum), then every block of quant_gemv_dp4a_rounded reads it.
// A token's rows are bitwise its 1-token product's. With act >= 0, gated as quant_gemv_dp4a.
std::size_t quant_rounded_inputs_bytes(int tokens, int cols);
void quant_round_inputs(const void* x, int tokens, int cols, void* rounded, Precision precision,
                        cudaStream_t stream);
void quant_gemv_dp4a_rounded(const void* rounded, int tokens, const QuantMatrixView& w, float* y,
                             int ldy, int act, void* act_out, Precision precision,
                             cudaStream_t stream);

// A gated MLP's fused gate_up product (w: [2 * width, cols], gate rows first) and its
// activation in one kernel: out[t, i] = act(gate[t, i]) * up[t, i], 16-bit, [tokens, width],
// as mlp_activation would write from quant_gemv's fp32 rows. The dp4a or stream kernel's
// epilogue where the kernel resolves to one of them, else the mma kernel's. Supported for the
// operands of quant_gemv_supported when w.rows is a multiple of 32, the default kernel resolves
// to mma, stream or dp4a at this format and token count, and WEFT_QUANT_GATED is not "0" (read
// once).
bool quant_gemv_gated_supported(const void* x, int tokens, const QuantMatrixView& w);
void quant_gemv_gated(ActivationKind kind, const void* x, int tokens, const QuantMatrixView& w,
                      void* out, Precision precision, cudaStream_t stream);
// The same through the kernel named: stream or dp4a (where they resolve to themselves) or mma.
void quant_gemv_gated(QuantGemvKernel kernel, ActivationKind kind, const void* x, int tokens,
                      const QuantMatrixView& w, void* out, Precision precision,
                      cudaStream_t stream);

// Writes rows [row_begin, row_begin + rows) of w, dequantized (min + q * scale in fp32, then
// rounded once), to out: [rows, w.cols] in `precision`, 16-byte aligned.
void quant_dequantize(const QuantMatrixView& w, int row_begin, int rows, void* out,
                      Precision precision, cudaStream_t stream);

}  // namespace weft::cuda
