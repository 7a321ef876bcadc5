// CudaModel::greedy_chain: a draft model's greedy chain on the GPU (docs/speculative.md). The
// steps are enqueued back to back on the model's stream without a wait: after each step the
// sampling kernel picks every row's argmax (greedy rows uploaded once for the whole chain),
// the next step's metadata upload is followed by a device copy of those argmaxes over its
// tokens (run()'s feed_tokens), and each step's argmaxes are copied into one pinned buffer.
// The host waits once, at the end; a decode step of a shape seen before replays its graph.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>

#include "kernels/cuda/sampling.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

Result<void> CudaModel::State::greedy_chain(const StepBatch& first, int steps,
                                            std::vector<std::int32_t>& tokens) {
  using sampling::DeviceCandidate;
  using sampling::DeviceSampleResult;
  const int S = static_cast<int>(first.sequences.size());
  const int V = spec.vocab_size;
  tokens.assign(static_cast<std::size_t>(std::max(steps, 0)) * static_cast<std::size_t>(S), -1);
  if (S == 0 || steps < 1) return {};
  if (first.logit_rows() != S) {
    return Error(ErrorCode::kInvalidArgument,
                 "a greedy chain's first step must give one logit row per slice (" +
                     std::to_string(first.logit_rows()) + " rows, " + std::to_string(S) +
                     " slices)");
  }
  // The positions after each slice's last token.
  std::vector<std::int32_t> last(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    const auto& seq = first.sequences[static_cast<std::size_t>(s)];
    if (seq.token_count < 1 || seq.slot_offset != 0) {
      return Error(ErrorCode::kInvalidArgument, "a greedy chain's slice " + std::to_string(s) +
                                                    " has no token or KV-Compress slots");
    }
    last[static_cast<std::size_t>(s)] =
        first.positions[static_cast<std::size_t>(seq.token_begin + seq.token_count - 1)];
    const auto cover = static_cast<std::size_t>(last[static_cast<std::size_t>(s)] + steps - 1) /
                           static_cast<std::size_t>(layout.page_size) +
                       1;
    if (seq.page_table.size() < cover) {
      return Error(ErrorCode::kInvalidArgument,
                   "a greedy chain's slice " + std::to_string(s) + " has " +
                       std::to_string(seq.page_table.size()) + " pages; its " +
                       std::to_string(steps) + " steps need " + std::to_string(cover));
    }
  }
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  // Buffers laid out as sample() lays them out (results, top entries, candidates).
  const auto align = [](std::size_t v) { return (v + 15) / 16 * 16; };
  const std::size_t rows_bytes = static_cast<std::size_t>(S) * sizeof(sampling::DeviceSampleRow);
  const std::size_t top_at = align(static_cast<std::size_t>(S) * sizeof(DeviceSampleResult));
  const std::size_t cand_at = align(
      top_at + static_cast<std::size_t>(S) * sampling::kDeviceTopEntries * sizeof(DeviceCandidate));
  const std::size_t out_bytes = cand_at + static_cast<std::size_t>(S) *
                                              sampling::kDeviceCandidatesPerRow *
                                              sizeof(DeviceCandidate);
  const std::size_t ids = static_cast<std::size_t>(steps) * static_cast<std::size_t>(S);
  // The previous step may still be running (launch() without sample()): wait before any
  // buffer it uses is reallocated.
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the step before the chain");
  }
  for (auto [buffer, bytes] : {std::pair{&sample_in, rows_bytes}, std::pair{&sample_out, out_bytes},
                               std::pair{&sample_work, static_cast<std::size_t>(S) * V * 4}}) {
    if (auto err = buffer->reserve(bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating the chain's sampling buffers");
    }
  }
  if (auto err = sample_in_host.reserve(rows_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating the chain's pinned buffers");
  }
  if (auto err = chain_host.reserve(ids * sizeof(std::int32_t)); err != cudaSuccess) {
    return cuda_error(err, "allocating the chain's pinned buffers");
  }
  auto* rows = sample_in_host.as<sampling::DeviceSampleRow>();
  for (int s = 0; s < S; ++s) {
    rows[s] = sampling::DeviceSampleRow{};
    rows[s].row = s;
    rows[s].mode = sampling::DeviceSampleMode::kGreedy;
  }
  if (auto err = cudaMemcpyAsync(sample_in.get(), rows, rows_bytes, cudaMemcpyHostToDevice, stream);
      err != cudaSuccess) {
    return cuda_error(err, "uploading the chain's rows");
  }
  auto* dev_out = sample_out.as<unsigned char>();
  const void* argmax = dev_out + offsetof(DeviceSampleResult, token);
  cuda::SampleArgs args;
  args.vocab = V;
  args.rows = sample_in.as<const sampling::DeviceSampleRow>();
  args.num_rows = S;
  args.edits = reinterpret_cast<const sampling::DeviceSampleEdit*>(sample_in.get());  // none
  args.masks = reinterpret_cast<const std::uint32_t*>(sample_in.get());               // none
  args.results = reinterpret_cast<DeviceSampleResult*>(dev_out);
  args.candidates = reinterpret_cast<DeviceCandidate*>(dev_out + cand_at);
  args.top = reinterpret_cast<DeviceCandidate*>(dev_out + top_at);

  StepBatch next;
  next.tokens.assign(static_cast<std::size_t>(S), 0);  // fed on the device
  next.positions.resize(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    SequenceSlice slice;
    slice.token_begin = s;
    slice.token_count = 1;
    slice.page_table = first.sequences[static_cast<std::size_t>(s)].page_table;
    next.sequences.push_back(std::move(slice));
  }
  std::vector<float> unused;
  auto fail = [&](Result<void> r) {
    feed_tokens = nullptr;
    cudaStreamSynchronize(stream);
    meta_pending = false;
    return r;
  };
  for (int d = 0; d < steps; ++d) {
    if (d > 0) {
      for (int s = 0; s < S; ++s)
        next.positions[static_cast<std::size_t>(s)] = last[static_cast<std::size_t>(s)] + d;
      feed_tokens = argmax;
      feed_pitch = sizeof(DeviceSampleResult);
    }
    auto ran = run(d == 0 ? first : next, unused, false);
    feed_tokens = nullptr;
    if (!ran) return fail(ran);
    args.logits = logits.as<float>();
    args.work = sample_work.as<float>();
    cuda::sample_rows(args, stream);
    if (auto err = cudaGetLastError(); err != cudaSuccess) {
      return fail(cuda_error(err, "launching the chain's argmax"));
    }
    if (auto err = cudaMemcpy2DAsync(
            chain_host.as<std::int32_t>() + static_cast<std::size_t>(d) * S, sizeof(std::int32_t),
            argmax, sizeof(DeviceSampleResult), sizeof(std::int32_t), static_cast<std::size_t>(S),
            cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return fail(cuda_error(err, "copying the chain's ids to the host"));
    }
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return fail(cuda_error(err, "running the chain"));
  }
  meta_pending = false;
  const auto* host = chain_host.as<std::int32_t>();
  // A row without an argmax (non-finite logits) ends its chain there.
  for (int s = 0; s < S; ++s) {
    bool ended = false;
    for (int d = 0; d < steps; ++d) {
      const std::size_t at = static_cast<std::size_t>(d) * S + static_cast<std::size_t>(s);
      ended = ended || host[at] < 0 || host[at] >= V;
      tokens[at] = ended ? -1 : host[at];
    }
  }
  return {};
}

}  // namespace weft::model
