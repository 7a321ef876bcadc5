// CudaModel::State::enqueue_step: every kernel of a step, in order, on `stream` (State::run,
// cuda_model.cpp, runs it plainly or captures it into a CUDA graph): the embedding, each
// layer's norms, products (cuBLAS, the row kernel, or quantized gemv), attention, MLP and
// residual adds, the tensor-parallel all-reduces, the L2 prefetches of the next weights on the
// side stream, and the final norm and lm head.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "kernels/cuda/alibi_attention.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/gemv_rows.hpp"
#include "kernels/cuda/learned_positions.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/residual_norm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/stream_fence.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"
#include "runtime/model/cuda/prefetch_switches.hpp"
#include "runtime/model/cuda/step_prefetch.hpp"

namespace weft::model {

void CudaModel::State::enqueue_step(PreparedStep& step) {
  const int T = step.T, V = spec.vocab_size, R = step.R, rows = step.rows;
  const int decode_count = step.decode_count, tile_count = step.tile_count;
  const int decode_context = step.decode_context;
  const bool fused_rope = step.fused_rope, has_tree = step.has_tree, has_verify = step.has_verify;
  const bool has_offsets = step.has_offsets, compressing = step.compressing;
  const bool head_in_window = step.head_in_window;
  const StepLayout& L = step.L;
  const cuda::FlatBatchView& fb = step.fb;
  cuda::PagedKvView& kvv = step.kvv;
  const std::size_t element_bytes = step.element_bytes;
  bool& blas_ok = step.blas_ok;
  bool& reduce_ok = step.reduce_ok;
  const auto* dev = meta.as<std::int32_t>();
  const auto* dev_f = meta.as<float>();
  // L2 prefetches of the next product's weights (prefetch_switches.hpp).
  using PrefetchRange = PrefetchSwitches::Range;
  using enum PrefetchSwitches::Range;
  const PrefetchSwitches& switches = PrefetchSwitches::get();
  const bool tp_overlap = switches.tp_overlap;

  const cuda::Precision P = options.precision;
  const int H = spec.hidden_size, I = spec.intermediate_size;
  const int QD = spec.q_dim(), KVD = spec.kv_dim();
  const int qkv_width = QD + 2 * KVD;
  const int mlp_width = spec.gated_mlp ? 2 * I : I;
  const auto norm_kind = spec.norm == Norm::kRms ? cuda::NormKind::kRms : cuda::NormKind::kLayer;
  const auto eps = static_cast<float>(spec.norm_epsilon);
  auto or_null = [](const DeviceBuffer& b) { return b.as<float>(); };
  auto mark = [&](const char* what) {
    if (!profiling) return;
    if (marks_used == marks.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      marks.emplace_back(what, e);
    }
    marks[marks_used].first = what;
    cudaEventRecord(marks[marks_used].second, stream);
    ++marks_used;
  };
  // Tensor parallel: o's and down's outputs are this rank's partial sums; the group adds them
  // up in place (on `stream`, so inside a captured graph too) before any bias or residual add.
  // `sixteen`: the product wrote bf16 rows into delta16 (row_parallel_product): they are summed
  // as bf16, half the bytes, and widened into `delta`; or, on pre-norm sequential layers whose
  // add_norm reads 16-bit rows with the bits of the widened ones (add_norm_delta16_exact), left
  // in delta16 for that add_norm to read (delta_in16, norm_delta).
  const bool norm_reads16 = spec.norm_placement != NormPlacement::kPost &&
                            !spec.parallel_attention && cuda::add_norm_delta16_exact(H);
  bool delta_in16 = false;
  auto all_reduce_delta = [&](bool sixteen) {
    if (tensor_parallel == nullptr) return;
    const auto n = static_cast<std::size_t>(T) * H;
    // NCCL's symmetric kernels may start before the product's writes are flushed (tp_fence).
    if (tp_fence && !(sixteen ? delta16 : delta).owned()) cuda::stream_fence(stream);
    delta_in16 = sixteen && norm_reads16;
    if (sixteen) {
      reduce_ok &= static_cast<bool>(tensor_parallel->all_reduce_sum_bf16(
          std::span<std::uint16_t>(delta16.as<std::uint16_t>(), n)));
      if (!delta_in16) cuda::convert_to_f32(delta16.get(), P, delta.as<float>(), n, stream);
    } else {
      reduce_ok &= static_cast<bool>(
          tensor_parallel->all_reduce_sum(std::span<float>(delta.as<float>(), n)));
    }
    mark("all-reduce");
  };
  // Points an add_norm at the last all-reduce's sums: delta16 or `delta`.
  auto norm_delta = [&](cuda::AddNormArgs& a) {
    a.delta = delta_in16 ? nullptr : delta.as<float>();
    a.delta16 = delta_in16 ? delta16.get() : nullptr;
  };

  // Steps of up to kQuantChunkedTokens tokens read the quantized matrices as such
  // (cuda_model_product.cpp).
  const bool quant_step = quant_format.has_value() && T <= kQuantChunkedTokens;
  auto uses_quant = [&](const DeviceBuffer& wq) { return quant_step && wq.get() != nullptr; };
  // L2 prefetches of the next product's weights on the side stream (step_prefetch.hpp), joined
  // back at the end of the step. A matrix's prefetch reads its quantized codes when the step
  // reads them (counted in 16-bit elements, as a range's).
  StepPrefetch pf(stream, side_stream, fork_event, join_event,
                  tile_count == 0 && T <= switches.tokens && side_stream != nullptr,
                  tensor_parallel != nullptr, quant_step ? quant_format : std::nullopt);
  auto prefetch = [&](PrefetchRange which, const DeviceBuffer& w, std::size_t elements,
                      bool beside_reduce = false) {
    pf.range(which, w.get(), elements, beside_reduce);
  };
  auto prefetch_matrix = [&](PrefetchRange which, const DeviceBuffer& w16, const DeviceBuffer& wq,
                             std::size_t out_rows, std::size_t cols, bool beside_reduce = false) {
    pf.matrix(which, w16.get(), wq.get(), out_rows, cols, beside_reduce);
  };
  // The decode rows' products through the row kernel (CudaModelOptions::row_kernel_tokens):
  // alone when the step has nothing else, else after cuBLAS has computed every row.
  const int row_limit = row_kernel_limit(options);
  const bool row_kernel = decode_count >= 1 && decode_count <= row_limit;
  // A product of the step (cuda_model_product.cpp).
  auto product = [&](const void* in_x, int tokens, const DeviceBuffer& w16, const DeviceBuffer& wq,
                     int out_features, int in_features, float* y, int ldy,
                     bool head = false) -> bool {
    return step_product(step, in_x, tokens, w16, wq, out_features, in_features, y, ldy, head);
  };
  // o's and down's products (H outputs), all-reduced next under tensor parallelism: into
  // `delta`, or with a bf16 all-reduce (set_tensor_parallel, WEFT_TP_BF16_REDUCE_TOKENS) for
  // steps of that many tokens or more, as bf16 rows into delta16 (the rows the next norm
  // rounds to bf16 anyway; the residual stays fp32). Returns whether it wrote delta16.
  // Steps of up to tp_fused_rows tokens on pre-norm sequential layers: every all-reduce is
  // fused with the add_norm after it (cuda_model_tp_fused.cpp).
  const bool fused = tensor_parallel != nullptr && tp_fused_rows > 0 && T <= tp_fused_rows &&
                     spec.norm_placement != NormPlacement::kPost && !spec.parallel_attention;
  int fused_slot = 0;  // o's products into slot 0, down's into slot 1
  // Steps through the LL exchange whose o and down go through gemv push their rows into the
  // peers' receive areas themselves (tp_push; ll_push.hpp); `pushed`: the last product did.
  const bool push_step =
      fused && T <= tp_fused.ll_rows && tp_push.takes(T, H) && blas->small_step(T) && !row_kernel;
  bool pushed = false;
  auto fused_slot_rows = [&] {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(tp_fused_base) +
                                    static_cast<std::size_t>(fused_slot) * tp_fused_slot_bytes);
  };
  // The sum over the group of the rows in slot `fused_slot`, added (with `delta_bias`) to the
  // residual and normalized by `weight`/`bias` into h, as add_norm; a null weight: the sum
  // alone into `delta` (the last layer's, for the final norm). Flips the slot.
  auto fused_reduce = [&](const float* delta_bias, const DeviceBuffer* weight,
                          const DeviceBuffer* bias) {
    cuda::AllReduceNormArgs f;
    f.group = tp_fused;
    f.offset = static_cast<std::size_t>(fused_slot) * tp_fused_slot_bytes;
    f.rows = T;
    f.n = H;
    if (weight != nullptr) {
      f.residual = x.as<float>();
      f.delta_bias = delta_bias;
      f.kind = norm_kind;
      f.weight = weight->as<float>();
      f.bias = or_null(*bias);
      f.eps = eps;
      f.out = h.get();
      f.precision = P;
    } else {
      f.sum_out = delta.as<float>();
    }
    f.pushed = pushed;
    reduce_ok &= cuda::allreduce_add_norm(f, stream);
    pushed = false;
    fused_slot ^= 1;
    mark("fused all-reduce + norm");
  };
  const bool reduce16 = !fused && tensor_parallel != nullptr && bf16_reduce_tokens > 0 &&
                        T >= bf16_reduce_tokens && P == cuda::Precision::kBF16 &&
                        !blas->small_step(T) &&
                        delta16.bytes() >= static_cast<std::size_t>(T) * H * cuda::kHalfBytes;
  // Under the fused all-reduce and norm (tp_fused_*, WEFT_TP_FUSED_NORM), o's and down's
  // products write into the window's slot `fused_slot` instead, and fused_reduce sums them.
  auto row_parallel_product = [&](const void* in, const DeviceBuffer& w16, const DeviceBuffer& wq,
                                  int in_features) -> bool {
    if (reduce16 && wq.get() == nullptr) {
      blas_ok &= blas->linear16(in, T, w16.get(), H, in_features, delta16.get(), H, P, stream);
      return true;
    }
    if (push_step && wq.get() == nullptr && cuda::gemv_supported(in, T, w16.get(), in_features)) {
      // What product() runs (Blas::linear's gemv), with the pushes.
      cuda::gemv(in, T, w16.get(), H, in_features, fused_slot_rows(), H, P, stream, &tp_push);
      pushed = true;
      return false;
    }
    blas_ok &=
        product(in, T, w16, wq, H, in_features, fused ? fused_slot_rows() : delta.as<float>(), H);
    return false;
  };
  // A 16-bit matrix for cuBLAS: w16, or a quantized matrix dequantized into the scratch buffer
  // (which holds any layer matrix whole).
  auto dense16 = [&](const DeviceBuffer& w16, const DeviceBuffer& wq, int out_rows,
                     int cols) -> const void* {
    if (wq.get() == nullptr || !quant_format) return w16.get();
    cuda::quant_dequantize({wq.get(), *quant_format, out_rows, cols}, 0, out_rows,
                           dequant_scratch.get(), P, stream);
    return dequant_scratch.get();
  };
  // Vocab-parallel head (set_tensor_parallel): this rank multiplies rows [r * Vs, r * Vs + mine)
  // of the (replicated) head into head_shard; an all-gather and a 2D copy per rank put every
  // rank's columns into `logits`. Only for a 16-bit head.
  const DeviceBuffer& head = lm_head.get() != nullptr ? lm_head : embedding;
  const bool vocab_split =
      vocab_parallel && tensor_parallel != nullptr && lm_head_q.get() == nullptr;
  const int tp_ranks = tensor_parallel != nullptr ? tensor_parallel->size() : 1;
  const int tp_rank = tensor_parallel != nullptr ? tensor_parallel->rank() : 0;
  const int Vs = (V + tp_ranks - 1) / tp_ranks;
  const int head_mine = vocab_split ? std::max(0, std::min(Vs, V - tp_rank * Vs)) : V;
  const void* head_rows =
      vocab_split
          ? static_cast<const void*>(static_cast<const std::byte*>(head.get()) +
                                     static_cast<std::size_t>(tp_rank) * Vs * H * cuda::kHalfBytes)
          : head.get();
  float* const shard_out = head_in_window ? head_window_shard : head_shard.as<float>();
  float* const gathered = head_in_window ? head_window_gathered : head_gathered.as<float>();
  // The next layer's qkv, or after the last layer the head (this rank's rows of it).
  auto prefetch_next = [&](std::size_t l, bool beside_reduce) {
    if (l + 1 < layers.size()) {
      prefetch_matrix(kQkvOrHead, layers[l + 1].qkv, layers[l + 1].qkv_q,
                      static_cast<std::size_t>(qkv_width), H, beside_reduce);
    } else if (vocab_split) {
      pf.range(kQkvOrHead, head_rows, static_cast<std::size_t>(head_mine) * H, beside_reduce);
    } else {
      prefetch_matrix(kQkvOrHead, head, lm_head_q, static_cast<std::size_t>(V), H, beside_reduce);
    }
  };
  // Under tensor parallelism the next qkv's prefetch is forked before down's all-reduce.
  const bool early_next_prefetch = tensor_parallel != nullptr && tp_overlap;

  // Pre-norm sequential layers (Llama and most families) defer each layer's last residual add
  // into the next layer's fused add_norm; post-norm and parallel-attention layers (OPT-350m,
  // Falcon) finish their residual within the layer instead (residual_norm.hpp).
  const bool post_norm = spec.norm_placement == NormPlacement::kPost;
  const bool deferred_residual = !post_norm && !spec.parallel_attention;
  // Norms inside the dp4a products (norm_fusable): o and down (but the last layer's) add into
  // `x` and write x * the next norm's weight into `h`; qkv (but layer 0's) and gate_up read it.
  const bool norm_fused = quant_step && T <= 2 && norm_fusable(T);
  const cuda::QuantNormArgs norm_in = norm_in_args();
  auto view_of = [&](const DeviceBuffer& wq, int rows, int cols) {
    return cuda::QuantMatrixView{wq.get(), *quant_format, rows, cols};
  };
  const bool alibi = alibi_slopes.get() != nullptr;

  // One layer's attention: bias, rope and KV store, then the attention kernels, into `attn`.
  auto attend = [&](std::size_t l, const Layer& W) {
    cuda::RopeArgs ra;
    ra.qkv = qkv_out.as<float>();
    ra.qkv_bias = or_null(W.qkv_bias);
    ra.num_heads = spec.num_heads;
    ra.rotary_dim = R;
    ra.interleaved = spec.rope.order == RopeOrder::kInterleaved;
    ra.inv_freq = dev_f + L.inv_freq;
    ra.attention_factor = dev_f + L.factor;
    ra.positions = dev + L.positions;
    kvv.layer_offset = l * (layout.bytes_per_layer_block() / element_bytes);
    cuda::AttentionArgs aa;
    aa.q = qkv_out.as<float>();
    aa.q_stride = static_cast<std::size_t>(qkv_width);
    aa.num_heads = spec.num_heads;
    aa.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
    aa.sliding_window =
        spec.layer_uses_window(first_layer + static_cast<int>(l)) ? spec.sliding_window : 0;
    aa.out = attn.get();
    aa.segment_keys = decode_segment_keys;
    if (alibi) {
      cuda::rope_store_kv(ra, fb, kvv, stream);
      mark("rope + kv store");
      cuda::alibi_attention(aa, alibi_slopes.as<float>(), fb, kvv, stream);
      mark("alibi attention");
      return;
    }
    // In a step of decode tokens only, the decode attention kernel rotates and stores them
    // itself (bitwise the same; one launch less per layer). Not with verification rows, whose
    // queries read the keys of the tokens before them in the same step, nor with KV-Compress
    // (the kernel would rotate by slot, and a compressing step scores the rotated queries).
    if (tile_count == 0 && !has_verify && !has_tree && !has_offsets && !compressing && fused_rope &&
        W.qkv_bias.get() == nullptr) {
      aa.rope_inv_freq = ra.inv_freq;
      aa.rope_factor = ra.attention_factor;
    } else {
      cuda::rope_store_kv(ra, fb, kvv, stream);
      mark("rope + kv store");
    }
    cuda::decode_attention(aa, fb, kvv, dev + L.decode_queries, decode_count, decode_context,
                           split_workspace.as<float>(), stream);
    mark("decode attention");
    cuda::prefill_attention(aa, fb, kvv, reinterpret_cast<const cuda::PrefillTile*>(dev + L.tiles),
                            tile_count, stream);
    mark("prefill attention");
    if (compressing) {  // as the CPU: after the layer's attention read the whole cache
      kv_compress.compress_layer(qkv_out.as<float>(), static_cast<std::size_t>(qkv_width), aa.scale,
                                 fb, kvv, stream);
      mark("kv compress");
    }
  };

  // Small steps through the small-step kernel (Blas::small_step) of a gated MLP without
  // biases: gate_up's product applies the activation itself (cuda::gemv_gated, the same bits;
  // one launch less per layer).
  auto gated_up = [&](const Layer& W, const void* in) {
    return spec.gated_mlp && W.up_bias.get() == nullptr && blas->small_step(T) && !row_kernel &&
           W.up.get() != nullptr && !uses_quant(W.up_q) &&
           cuda::gemv_gated_supported(in, T, W.up.get(), mlp_width, H);
  };
  // One layer's MLP from the 16-bit rows `in`, into `delta` (its down bias not yet added).
  auto mlp_block = [&](std::size_t l, const Layer& W, const void* in) {
    // Without a bias, gate and up are written as 16 bits (what the activation reads them
    // as in transformers too): half the bytes of fp32 through the product and the
    // activation. With a bias, or on the small-step kernel or the row kernel (16-bit weights),
    // fp32 as before.
    if (W.up_bias.get() == nullptr && !blas->small_step(T) && !uses_quant(W.up_q) &&
        !(row_kernel && W.up.get() != nullptr)) {
      blas_ok &= blas->linear16(in, T, dense16(W.up, W.up_q, mlp_width, H), mlp_width, H, mlp.get(),
                                mlp_width, P, stream);
      mark("gate_up product");
      prefetch(kDown, W.down, static_cast<std::size_t>(H) * I);
      cuda::mlp_activation16(kernel_activation(spec.activation), spec.gated_mlp, mlp.get(), nullptr,
                             T, I, act.get(), P, stream);
    } else if (const cuda::QuantMatrixView up_view{
                   W.up_q.get(), quant_format.value_or(cuda::QuantGemvFormat{}), mlp_width, H};
               spec.gated_mlp && W.up_bias.get() == nullptr && uses_quant(W.up_q) &&
               T <= cuda::kQuantGemvMaxTokens && cuda::quant_gemv_gated_supported(in, T, up_view)) {
      // Quantized decode: the gate_up product applies the activation itself
      // (quant_gemv_gated; WEFT_QUANT_GATED=0 turns it off), and with norm_fused the norm.
      if (norm_fused) {
        cuda::quant_gemv_dp4a_norm_in(in, T, up_view, nullptr, 0,
                                      static_cast<int>(kernel_activation(spec.activation)),
                                      act.get(), norm_in, P, stream);
      } else if (rounded_dp4a(T)) {
        cuda::quant_round_inputs(in, T, H, rounded_inputs.get(), P, stream);
        cuda::quant_gemv_dp4a_rounded(rounded_inputs.get(), T, up_view, nullptr, 0,
                                      static_cast<int>(kernel_activation(spec.activation)),
                                      act.get(), P, stream);
      } else {
        cuda::quant_gemv_gated(kernel_activation(spec.activation), in, T, up_view, act.get(), P,
                               stream);
      }
      mark("gate_up product");
      prefetch_matrix(kDown, W.down, W.down_q, H, I);
    } else if (gated_up(W, in)) {
      cuda::gemv_gated(kernel_activation(spec.activation), in, T, W.up.get(), mlp_width, H,
                       act.get(), P, stream);
      mark("gate_up product");
      prefetch_matrix(kDown, W.down, W.down_q, H, I);
    } else {
      blas_ok &= product(in, T, W.up, W.up_q, mlp_width, H, mlp.as<float>(), mlp_width);
      mark("gate_up product");
      prefetch_matrix(kDown, W.down, W.down_q, H, I);
      cuda::mlp_activation(kernel_activation(spec.activation), spec.gated_mlp, mlp.as<float>(),
                           or_null(W.up_bias), T, I, act.get(), P, stream);
    }
    mark("activation");
    bool down16 = false;
    if (norm_fused && l + 1 < layers.size()) {
      cuda::quant_gemv_dp4a_norm_out(act.get(), T, view_of(W.down_q, H, I),
                                     norm_out_args(layers[l + 1].attn_norm), P, stream);
    } else {
      down16 = row_parallel_product(act.get(), W.down, W.down_q, I);
    }
    mark("down product");
    if (early_next_prefetch) prefetch_next(l, true);  // beside the all-reduce
    if (!fused) {
      all_reduce_delta(down16);
    } else if (l + 1 < layers.size()) {  // and the next layer's first norm
      fused_reduce(or_null(W.down_bias), &layers[l + 1].attn_norm, &layers[l + 1].attn_norm_bias);
    } else {  // the sum into `delta`, for the final norm
      fused_reduce(nullptr, nullptr, nullptr);
    }
  };

  // Every kernel of the step, in order.
  mark("start");
  if (!embeds) {
    // A later pipeline stage starts from the residual stream the stage before produced;
    // post-norm layers read it as 16 bits too.
    if (stage_in_device != nullptr) {
      cudaMemcpyAsync(x.get(), stage_in_device, static_cast<std::size_t>(T) * H * 4,
                      cudaMemcpyDeviceToDevice, stream);
    } else {
      cudaMemcpyAsync(x.get(), stage_in, static_cast<std::size_t>(T) * H * 4,
                      cudaMemcpyHostToDevice, stream);
    }
    if (post_norm) cuda::rows_to_precision(x.as<float>(), nullptr, T, H, h.get(), P, stream);
  } else {
    cuda::embedding_gather(embedding.get(), P, dev + L.tokens, T, H, x.as<float>(), stream);
    if (spec.embedding_scale != 1.0 || position_table.get() != nullptr) {
      cuda::scale_add_positions(x.as<float>(), T, H, static_cast<float>(spec.embedding_scale),
                                position_table.get(), P, dev + L.positions, spec.position_offset,
                                stream);
    }
    if (embedding_norm.get() != nullptr || post_norm) {
      // Bloom's embedding norm; post-norm layers read the residual itself as 16 bits.
      if (embedding_norm.get() != nullptr) {
        cuda::ResidualNormArgs en;
        en.residual = x.as<float>();
        en.rows = T;
        en.n = H;
        en.kind = norm_kind;
        en.weight = embedding_norm.as<float>();
        en.bias = or_null(embedding_norm_bias);
        en.eps = eps;
        en.out = post_norm ? h.get() : nullptr;
        en.precision = P;
        cuda::residual_norm(en, stream);
      } else {
        cuda::rows_to_precision(x.as<float>(), nullptr, T, H, h.get(), P, stream);
      }
    }
  }
  mark("embedding");
  if (!layers.empty())
    prefetch_matrix(kQkvOrHead, layers[0].qkv, layers[0].qkv_q, static_cast<std::size_t>(qkv_width),
                    H);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Layer& W = layers[l];
    cuda::AddNormArgs an;
    an.residual = x.as<float>();
    if (l > 0 && deferred_residual) {
      norm_delta(an);
      an.delta_bias = or_null(layers[l - 1].down_bias);
    }
    an.rows = T;
    an.n = H;
    an.kind = norm_kind;
    an.weight = W.attn_norm.as<float>();
    an.bias = or_null(W.attn_norm_bias);
    an.eps = eps;
    an.out = h.get();
    an.precision = P;
    // fused: done by the last layer's down; norm_fused: by its product
    if (!post_norm && !(fused && l > 0) && !(norm_fused && l > 0)) {
      cuda::add_norm(an, stream);
      mark("norm");
    }
    const bool own_mlp_norm = spec.parallel_attention && W.mlp_norm.get() != nullptr;
    if (own_mlp_norm) {
      cuda::AddNormArgs mn = an;
      mn.weight = W.mlp_norm.as<float>();
      mn.bias = or_null(W.mlp_norm_bias);
      mn.out = h_mlp.get();
      cuda::add_norm(mn, stream);
      mark("norm");
    }
    if (norm_fused && l > 0) {
      cuda::quant_gemv_dp4a_norm_in(h.get(), T, view_of(W.qkv_q, qkv_width, H), qkv_out.as<float>(),
                                    qkv_width, -1, nullptr, norm_in, P, stream);
    } else {
      blas_ok &= product(h.get(), T, W.qkv, W.qkv_q, qkv_width, H, qkv_out.as<float>(), qkv_width);
    }
    mark("qkv product");
    prefetch_matrix(kO, W.o, W.o_q, H, QD);
    // gate_up's first rows stream while the attention runs (prefetch_switches.hpp).
    if (norm_fused && spec.gated_mlp) pf.gate_up_ahead(W.up_q.get(), mlp_width, H);
    attend(l, W);
    bool o16 = false;
    if (norm_fused) {
      cuda::quant_gemv_dp4a_norm_out(attn.get(), T, view_of(W.o_q, H, QD),
                                     norm_out_args(W.mlp_norm), P, stream);
    } else {
      o16 = row_parallel_product(attn.get(), W.o, W.o_q, QD);
    }
    mark("o product");
    prefetch_matrix(kGateUp, W.up, W.up_q, static_cast<std::size_t>(mlp_width), H, true);
    if (!fused) all_reduce_delta(o16);  // while the side stream prefetches gate_up
    cuda::ResidualNormArgs rn;
    rn.residual = x.as<float>();
    rn.delta = delta.as<float>();
    rn.rows = T;
    rn.n = H;
    rn.kind = norm_kind;
    rn.eps = eps;
    rn.out = h.get();
    rn.precision = P;
    if (fused) {
      fused_reduce(or_null(W.o_bias), &W.mlp_norm, &W.mlp_norm_bias);
      mlp_block(l, W, h.get());
    } else if (norm_fused) {
      mlp_block(l, W, h.get());  // o's product did the add and gate_up does the norm
    } else if (deferred_residual) {
      norm_delta(an);
      an.delta_bias = or_null(W.o_bias);
      an.weight = W.mlp_norm.as<float>();
      an.bias = or_null(W.mlp_norm_bias);
      cuda::add_norm(an, stream);
      mark("norm");
      mlp_block(l, W, h.get());
    } else if (spec.parallel_attention) {
      // x + attn(n_a(x)) + mlp(n_m(x)): the MLP reads the norms taken before the add.
      cuda::add_residual(x.as<float>(), delta.as<float>(), or_null(W.o_bias), T, H, stream);
      mlp_block(l, W, own_mlp_norm ? h_mlp.get() : h.get());
      cuda::add_residual(x.as<float>(), delta.as<float>(), or_null(W.down_bias), T, H, stream);
      mark("residual");
    } else {  // post-norm: x = n_a(x + attn(x)); x = n_m(x + mlp(x))
      rn.delta_bias = or_null(W.o_bias);
      rn.weight = W.attn_norm.as<float>();
      rn.bias = or_null(W.attn_norm_bias);
      cuda::residual_norm(rn, stream);
      mark("norm");
      mlp_block(l, W, h.get());
      rn.delta_bias = or_null(W.down_bias);
      rn.weight = W.mlp_norm.as<float>();
      rn.bias = or_null(W.mlp_norm_bias);
      cuda::residual_norm(rn, stream);
      mark("norm");
    }
    if (!early_next_prefetch) prefetch_next(l, false);
  }
  if (!ends) {
    // A stage before the last hands on the whole residual stream, its deferred add done.
    if (deferred_residual && !layers.empty()) {
      if (delta_in16) {
        cuda::convert_to_f32(delta16.get(), P, delta.as<float>(), static_cast<std::size_t>(T) * H,
                             stream);
      }
      cuda::add_residual(x.as<float>(), delta.as<float>(), or_null(layers.back().down_bias), T, H,
                         stream);
    }
    pf.join();
    if (stage_out_device != nullptr) {
      cudaMemcpyAsync(stage_out_device, x.get(), static_cast<std::size_t>(T) * H * 4,
                      cudaMemcpyDeviceToDevice, stream);
    }
    return;
  }
  // The last residual add and the final norm, only for the rows that need logits; a
  // post-norm network has no final norm, its rows go to the head as they are.
  if (final_norm.get() == nullptr) {
    cuda::rows_to_precision(x.as<float>(), dev + L.logit_rows, rows, H, h.get(), P, stream);
  } else {
    cuda::AddNormArgs fin;
    fin.residual = x.as<float>();
    if (!layers.empty() && deferred_residual) {
      norm_delta(fin);
      fin.delta_bias = or_null(layers.back().down_bias);
    }
    fin.row_index = dev + L.logit_rows;
    fin.rows = rows;
    fin.n = H;
    fin.kind = norm_kind;
    fin.weight = final_norm.as<float>();
    fin.bias = or_null(final_norm_bias);
    fin.eps = eps;
    fin.write_back = false;
    fin.out = h.get();
    fin.precision = P;
    cuda::add_norm(fin, stream);
  }
  mark("norm");
  if (vocab_split) {
    if (head_mine > 0) {
      blas_ok &= blas->linear(h.get(), rows, head_rows, head_mine, H, shard_out, Vs, P, stream);
    }
    mark("lm_head product");
    const auto shard_floats = static_cast<std::size_t>(rows) * Vs;
    if (tp_fence && head_in_window) cuda::stream_fence(stream);
    reduce_ok &= static_cast<bool>(
        tensor_parallel->all_gather(std::span<const float>(shard_out, shard_floats),
                                    std::span<float>(gathered, shard_floats * tp_ranks)));
    for (int k = 0; k < tp_ranks; ++k) {
      const int width = std::min(Vs, V - k * Vs);
      if (width <= 0) continue;
      blas_ok &=
          cudaMemcpy2DAsync(logits.as<float>() + static_cast<std::size_t>(k) * Vs,
                            static_cast<std::size_t>(V) * 4, gathered + shard_floats * k,
                            static_cast<std::size_t>(Vs) * 4, static_cast<std::size_t>(width) * 4,
                            rows, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
    }
    mark("lm_head all-gather");
  } else {
    blas_ok &= product(h.get(), rows, head, lm_head_q, V, H, logits.as<float>(), V, true);
    mark("lm_head product");
  }
  if (stage_out_device != nullptr) {
    cudaMemcpyAsync(stage_out_device, logits.as<float>(), static_cast<std::size_t>(rows) * V * 4,
                    cudaMemcpyDeviceToDevice, stream);
  }
  pf.join();
}

}  // namespace weft::model
