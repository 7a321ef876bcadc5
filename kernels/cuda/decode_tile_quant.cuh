#pragma once
// The streaming decode kernel's step over a tile of one-byte KV rows (int8 or fp8 e4m3 pages,
// kernels/cuda/kv_element.cuh): tile_attend16's arithmetic (decode_tile.cuh) on keys and values
// converted to the 16-bit type T of the mma. Every int8 and e4m3 value is exactly a bf16 and
// an fp16 value, so the conversion loses nothing; the rows' fp32 scales are applied where they
// cost one multiply per key: K's scale multiplies the key's score after q.k, V's scale the
// key's softmax weight before P.V (the running sum l takes the weight unscaled). Included by
// .cu files only.
//
// Tile layout in shared memory (one ring stage): K [16][D] bytes, V [16][D] bytes, then the
// 16 K scales and the 16 V scales (fp32). Rows are swizzled so the fragment reads below hit
// distinct banks: K by 32-byte units (qk_unit_swizzle), V by 16-byte chunks (qv_chunk_swizzle).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <type_traits>

#include "kernels/cuda/decode_tile.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/tree_slots.cuh"

namespace weft::cuda::detail {

// 4 bytes from global to shared memory (zeros where `live` is false); see cp_async16.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool live) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(live ? 4 : 0));
}

// Where key p of kv head h lives in a one-byte pool, in bytes from the pool's start: its key
// row (the value row is num_kv_heads * page_size * head_dim further) and its K scale, or its
// V scale when `value`. 64-bit: a one-byte pool may pass 64 GiB, so 16-byte units would not
// fit 32 bits.
struct QuantRow {
  unsigned long long key = 0, scale = 0;
};
__device__ __forceinline__ QuantRow quant_row(const PagedKvView& kv, const SlotTable& table, int p,
                                              int h, bool value) {
  const int slot = table.slot(p);
  const int page = table.pages[slot / kv.page_size];
  const unsigned long long row =
      static_cast<unsigned long long>(h) * kv.page_size + slot % kv.page_size;
  const unsigned long long base =
      static_cast<unsigned long long>(page) * kv.page_elems + kv.layer_offset;
  const unsigned long long rows = static_cast<unsigned long long>(kv.num_kv_heads) * kv.page_size;
  QuantRow out;
  out.key = base + row * kv.head_dim;
  out.scale = base + kv.scales_offset + 4 * (row + (value ? rows : 0));
  return out;
}

// K row r's 32-byte unit u is stored at unit u ^ qk_unit_swizzle(r): a half warp's 8-byte
// reads (rows g = 0..3 or 4..7, 32 bytes each) then cover all 32 banks once.
template <int D>
__device__ __forceinline__ int qk_unit_swizzle(int r) {
  return D >= 128 ? (r & 3) : ((r >> 1) & 1);
}
// V row r's 16-byte chunk c is stored at c ^ qv_chunk_swizzle(r): lane (g, tq) reads bytes
// [g D/8, (g + 1) D/8) of rows 2tq + const, so the rows of one read differ in (r >> 1) & 3 and
// the swizzle spreads them over the bank groups the lanes' g leave free (at D = 64 rows of a
// read share one 64-byte half, a 2-way conflict that no swizzle removes).
template <int D>
__device__ __forceinline__ int qv_chunk_swizzle(int r) {
  const int t = (r >> 1) & 3;
  if constexpr (D == 128) return t << 1;
  if constexpr (D == 256) return (t & 1) | ((t & 2) << 1);
  return (t & 1) << 1;
}
// Where 16-byte chunk c of row r of a K or V tile is stored (in chunks, L1 = D / 16 a row).
template <int D>
__device__ __forceinline__ int qk_chunk_at(int r, int c) {
  return r * (D / 16) + ((((c >> 1) ^ qk_unit_swizzle<D>(r)) << 1) | (c & 1));
}
template <int D>
__device__ __forceinline__ int qv_chunk_at(int r, int c) {
  return r * (D / 16) + (c ^ qv_chunk_swizzle<D>(r));
}

// Two e4m3 values as fp16 (low 16 bits of t: element 0 in the low byte) to two T values in
// one register. fp16: the hardware's paired conversion, exact. bf16: each fp16 widened to fp32
// (exact), and the bf16 is the fp32's high half: an e4m3 value has at most 4 significant bits,
// so the low 16 bits of its fp32 are zero and the truncation is exact (a PRMT, where the
// rounding pack cvt.rn.bf16x2.f32 would be another conversion-unit instruction).
template <class T>
__device__ __forceinline__ unsigned fp8_pair(unsigned short t) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(t), __NV_E4M3);
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<unsigned>(h.x) | (static_cast<unsigned>(h.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    return __byte_perm(__float_as_uint(f.x), __float_as_uint(f.y), 0x7632);
  }
}

// fp16 int8 only: the bytes of a staged word with their sign bits flipped (x + 128, unsigned),
// once per word, for kv_pairs; every other (T, KV) takes the word as it is.
template <class T, class KV>
__device__ __forceinline__ unsigned kv_word(unsigned w) {
  if constexpr (std::is_same_v<KV, KvInt8> && std::is_same_v<T, __half>) return w ^ 0x80808080u;
  return w;
}

// Two one-byte elements, byte x and byte y of the 8 bytes {b, a} (a's bytes are 0-3), as two
// T values in one register (x in the low half). Exact: int8 through the exponent trick (the
// byte in the mantissa of a power of two, the power subtracted), e4m3 by fp8_pair.
template <class T, class KV>
__device__ __forceinline__ unsigned kv_pair(unsigned a, unsigned b, int x, int y) {
  if constexpr (std::is_same_v<KV, KvInt8>) {
    const unsigned t = __byte_perm(a, b, static_cast<unsigned>(x | (y << 8)));  // bytes 0 and 2
    if constexpr (std::is_same_v<T, __half>) {
      // 0x64uu is 1024 + u as fp16; u = x + 128 (the sign bit flipped); minus 1152 gives x.
      const unsigned h = (t & 0x00FF00FFu) ^ 0x64806480u;
      const __half2 v =
          __hsub2(*reinterpret_cast<const __half2*>(&h), __half2half2(__ushort_as_half(0x6480)));
      return *reinterpret_cast<const unsigned*>(&v);
    } else {
      // 0x43ll is 128 + l as bf16 (l: the low 7 bits); 0x4300 | (sign << 7) is 128 or 256, so
      // the difference is l - 128 * sign, the two's complement value.
      const unsigned lo = (t & 0x007F007Fu) | 0x43004300u, hi = (t & 0x00800080u) | 0x43004300u;
      const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&lo),
                                       *reinterpret_cast<const __nv_bfloat162*>(&hi));
      return *reinterpret_cast<const unsigned*>(&v);
    }
  } else {
    const unsigned t = __byte_perm(a, b, static_cast<unsigned>(x | (y << 4)));  // bytes 0, 1
    return fp8_pair<T>(static_cast<unsigned short>(t & 0xFFFFu));
  }
}

// Two pairs at once: bytes (x0, y0) and (x1, y1) of {b, a} as p0 and p1, bitwise kv_pair's,
// with a and b from kv_word. Where one pair's two bytes share a register with the other's
// (K: four bytes of one word; V: one PRMT gathers the four bytes of two keys), the pairs share
// the gathering PRMT: fp8 converts the gathered word's two halves, fp16 int8 lays its bytes
// into 0x64 mantissas with one PRMT per pair and one subtraction. bf16 int8 stays kv_pair's
// (its mask-and-or already takes the bytes where the PRMT put them).
template <class T, class KV>
__device__ __forceinline__ void kv_pairs(unsigned a, unsigned b, int x0, int y0, int x1, int y1,
                                         unsigned& p0, unsigned& p1) {
  if constexpr (std::is_same_v<KV, KvInt8> && !std::is_same_v<T, __half>) {
    p0 = kv_pair<T, KV>(a, b, x0, y0);
    p1 = kv_pair<T, KV>(a, b, x1, y1);
  } else {
    const unsigned t =
        __byte_perm(a, b, static_cast<unsigned>(x0 | (y0 << 4) | (x1 << 8) | (y1 << 12)));
    if constexpr (std::is_same_v<KV, KvInt8>) {
      // t's bytes are x + 128 (kv_word); 0x64uu is 1024 + u as fp16, minus 1152 gives x.
      const __half2 bias = __half2half2(__ushort_as_half(0x6480));
      const unsigned h0 = __byte_perm(t, 0x64646464u, 0x5140),
                     h1 = __byte_perm(t, 0x64646464u, 0x5342);
      const __half2 v0 = __hsub2(*reinterpret_cast<const __half2*>(&h0), bias);
      const __half2 v1 = __hsub2(*reinterpret_cast<const __half2*>(&h1), bias);
      p0 = *reinterpret_cast<const unsigned*>(&v0);
      p1 = *reinterpret_cast<const unsigned*>(&v1);
    } else {
      p0 = fp8_pair<T>(static_cast<unsigned short>(t & 0xFFFFu));
      p1 = fp8_pair<T>(static_cast<unsigned short>(t >> 16));
    }
  }
}

// What the weights P.V takes are multiplied by besides V's scale: a power of two near the
// element type's largest value, so p * scale * boost is about p * max|v| of the row, the range
// 16-bit pages give the weights. Without it, fp16 weights of small probability times a scale
// of max|v| / 448 fall below fp16's normal range and lose their digits. The caller multiplies
// the running sum l by the same power of two before merge_split (exact, as is every product
// by a power of two), so the output acc / l is unchanged.
template <class KV>
inline constexpr float kv_weight_boost = std::is_same_v<KV, KvInt8> ? 128.0f : 512.0f;

// tile_attend16 for a one-byte tile: ks, vs the stage's K and V rows (D bytes each, swizzled
// as above), sc its 32 scales (K then V). Keys k0 .. k0 + 15, keys >= end masked; lane (g, tq)
// as in tile_attend16, and acc's layout is the same, so merge_split reads it unchanged; acc
// holds kv_weight_boost<KV> times the 16-bit kernel's sums, l does not.
template <class T, class KV, int D, int KC, int VW>
__device__ __forceinline__ void tile_attend_q(const unsigned char* ks, const unsigned char* vs,
                                              const float* sc, int k0, int end, int g, int tq,
                                              const unsigned (&qh)[KC][4],
                                              const unsigned (&ql)[KC][4], float& m, float& l,
                                              float (&acc)[VW][4]) {
  static_assert(KC == D / 32 && VW == D / 16);
  float sk[2][4];
#pragma unroll
  for (int blk = 0; blk < 2; ++blk) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      sk[blk][e] = 0.0f;
    const int rr = 8 * blk + g, sw = qk_unit_swizzle<D>(rr);
    const uint2* krow = reinterpret_cast<const uint2*>(ks) + rr * (D / 8);
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      // Elements 32c + 8tq .. + 7 of key rr (query_fragments' order).
      const uint2 kr = krow[((c ^ sw) << 2) + tq];
      const unsigned kx = kv_word<T, KV>(kr.x), ky = kv_word<T, KV>(kr.y);
      unsigned b0, b1, b2, b3;
      kv_pairs<T, KV>(kx, kx, 0, 1, 2, 3, b0, b1);
      kv_pairs<T, KV>(ky, ky, 0, 1, 2, 3, b2, b3);
      const unsigned a0[4] = {qh[c][0], 0u, qh[c][1], 0u};
      const unsigned a1[4] = {qh[c][2], 0u, qh[c][3], 0u};
      const unsigned l0[4] = {ql[c][0], 0u, ql[c][1], 0u};
      const unsigned l1[4] = {ql[c][2], 0u, ql[c][3], 0u};
      mma_16816(sk[blk], a0, b0, b1, T{});
      mma_16816(sk[blk], l0, b0, b1, T{});
      mma_16816(sk[blk], a1, b2, b3, T{});
      mma_16816(sk[blk], l1, b2, b3, T{});
    }
  }
  // The keys' scales: K's into the scores, V's kept for the weights.
  const float2 ka = reinterpret_cast<const float2*>(sc)[tq];
  const float2 kb = reinterpret_cast<const float2*>(sc)[4 + tq];
  const float2 va = reinterpret_cast<const float2*>(sc + 16)[tq];
  const float2 vb = reinterpret_cast<const float2*>(sc + 16)[4 + tq];
  float s[4] = {sk[0][0] * ka.x, sk[0][1] * ka.y, sk[1][0] * kb.x, sk[1][1] * kb.y};
  constexpr float boost = kv_weight_boost<KV>;
  const float vscale[4] = {va.x * boost, va.y * boost, vb.x * boost, vb.y * boost};
  const int key[4] = {k0 + 2 * tq, k0 + 2 * tq + 1, k0 + 8 + 2 * tq, k0 + 9 + 2 * tq};
  float mx = -INFINITY;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (key[e] >= end) s[e] = -INFINITY;
    mx = fmaxf(mx, s[e]);
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m, mx);
  const float corr = expf(m - m_new);
  m = m_new;
  float p[4];
  l *= corr;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float w = expf(s[e] - m_new);
    l += w;
    p[e] = w * vscale[e];
  }
  float r[4];
  const unsigned ph0 = pack2<T>(p[0], p[1], r[0], r[1]);
  const unsigned ph1 = pack2<T>(p[2], p[3], r[2], r[3]);
  const unsigned pl0 = pack2<T>(r[0], r[1]), pl1 = pack2<T>(r[2], r[3]);
  // Where no head's max moved (every corr is 1, the common case past a context's first
  // tiles) the rescale of acc is a product by 1 and is skipped: bitwise the same.
  const bool rescale = !__all_sync(0xffffffffu, corr == 1.0f);
  if (rescale) {  // warp-uniform: one branch around the whole rescale, not predicated products
    const float ca = __shfl_sync(0xffffffffu, corr, 8 * tq);
    const float cb = __shfl_sync(0xffffffffu, corr, 8 * tq + 4);
#pragma unroll
    for (int i = 0; i < VW; ++i) {
      acc[i][0] *= ca;
      acc[i][1] *= cb;
      acc[i][2] *= ca;
      acc[i][3] *= cb;
    }
  }
  // V bytes [g D/8, (g + 1) D/8) of keys 2tq, 2tq + 1, 8 + 2tq, 9 + 2tq: VB words each.
  constexpr int VB = D / 32;
  unsigned vw[4][VB];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int rr = (e >> 1) * 8 + 2 * tq + (e & 1);
    if constexpr (D == 64) {
      const uint2* row = reinterpret_cast<const uint2*>(vs) + rr * (D / 8);
      const uint2 w = row[((g >> 1) ^ qv_chunk_swizzle<D>(rr)) * 2 + (g & 1)];
      vw[e][0] = kv_word<T, KV>(w.x);
      vw[e][1] = kv_word<T, KV>(w.y);
    } else {
      const uint4* row = reinterpret_cast<const uint4*>(vs) + rr * (D / 16);
#pragma unroll
      for (int h = 0; h < VB / 4; ++h) {
        const uint4 w = row[(g * (VB / 4) + h) ^ qv_chunk_swizzle<D>(rr)];
        vw[e][4 * h] = kv_word<T, KV>(w.x);
        vw[e][4 * h + 1] = kv_word<T, KV>(w.y);
        vw[e][4 * h + 2] = kv_word<T, KV>(w.z);
        vw[e][4 * h + 3] = kv_word<T, KV>(w.w);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < VW; ++i) {
    // Row tile i: elements g D/8 + 2i and + 1, bytes b and b + 1 of word i / 2.
    const int wi = i >> 1, b = 2 * (i & 1);
    unsigned av[4];
    kv_pairs<T, KV>(vw[0][wi], vw[1][wi], b, 4 + b, b + 1, 5 + b, av[0], av[1]);
    kv_pairs<T, KV>(vw[2][wi], vw[3][wi], b, 4 + b, b + 1, 5 + b, av[2], av[3]);
    mma_16816(acc[i], av, ph0, ph1, T{});
    mma_16816(acc[i], av, pl0, pl1, T{});
  }
}

}  // namespace weft::cuda::detail
