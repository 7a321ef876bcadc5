// CudaModel::sample: the host side of the GPU sampler (kernels/cuda/sampling.hpp): packs the
// rows' descriptions into one upload, runs the kernel, and copies back results, top entries
// and the candidates actually collected.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/sampling.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

Result<void> CudaModel::State::sample(const DeviceSamplingInput& in, DeviceSamplingOutput& out) {
  using sampling::DeviceCandidate;
  using sampling::DeviceSampleResult;
  using sampling::DeviceSampleStatus;
  const int V = spec.vocab_size;
  const auto n = static_cast<int>(in.rows.size());
  out.results.assign(in.rows.size(), DeviceSampleResult{});
  out.candidates.clear();
  out.top.clear();
  out.host_rows.assign(in.rows.size(), {});
  if (launched_rows < 0) {
    return Error(ErrorCode::kInternal, "CUDA sampler: no step was launched to sample from");
  }
  const int step_rows = launched_rows;
  launched_rows = -1;  // each launched step is sampled once
  if (auto err = cudaSetDevice(options.device); err != cudaSuccess) {
    return cuda_error(err, "selecting device " + std::to_string(options.device));
  }
  for (const auto& r : in.rows) {
    const bool mask_ok =
        r.mask_word_offset < 0 ||
        static_cast<std::size_t>(r.mask_word_offset) + (static_cast<std::size_t>(V) + 31) / 32 <=
            in.masks.size();
    const bool edits_ok = r.edit_begin >= 0 && r.edit_count >= 0 &&
                          static_cast<std::size_t>(r.edit_begin) + r.edit_count <= in.edits.size();
    if (r.row < 0 || r.row >= step_rows || !mask_ok || !edits_ok || r.logprobs < 0 ||
        r.logprobs > sampling::kDeviceTopEntries) {
      cudaStreamSynchronize(stream);
      return Error(ErrorCode::kInternal, "CUDA sampler: row " + std::to_string(r.row) +
                                             " of a step with " + std::to_string(step_rows) +
                                             " logit rows has an invalid description");
    }
  }
  for (const auto& e : in.edits) {
    if (e.id < 0 || e.id >= V) {
      cudaStreamSynchronize(stream);
      return Error(ErrorCode::kInternal, "CUDA sampler: edit of token " + std::to_string(e.id) +
                                             " outside the vocabulary");
    }
  }
  if (n == 0) {
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the step");
    }
    return {};
  }
  const auto align = [](std::size_t v) { return (v + 15) / 16 * 16; };
  const std::size_t rows_bytes = in.rows.size() * sizeof(sampling::DeviceSampleRow);
  const std::size_t edits_at = align(rows_bytes);
  const std::size_t masks_at =
      align(edits_at + in.edits.size() * sizeof(sampling::DeviceSampleEdit));
  const std::size_t in_bytes = masks_at + in.masks.size() * 4;
  // Output: results and top entries first (copied back together), then each row's slot of
  // kDeviceCandidatesPerRow candidates (copied back as far as the fullest row filled its).
  const std::size_t top_at = align(in.rows.size() * sizeof(DeviceSampleResult));
  const std::size_t top_count = in.rows.size() * sampling::kDeviceTopEntries;
  const std::size_t head_bytes = align(top_at + top_count * sizeof(DeviceCandidate));
  const std::size_t per_row = sampling::kDeviceCandidatesPerRow;
  const std::size_t cand_count = in.rows.size() * per_row;
  const std::size_t cand_at = head_bytes;
  const std::size_t out_bytes = cand_at + cand_count * sizeof(DeviceCandidate);
  for (auto [buffer, bytes] : {std::pair{&sample_in, in_bytes}, std::pair{&sample_out, out_bytes},
                               std::pair{&sample_work, in.rows.size() * V * 4}}) {
    if (auto err = buffer->reserve(bytes); err != cudaSuccess) {
      return cuda_error(err, "allocating the sampler's buffers");
    }
  }
  if (auto err = sample_in_host.reserve(in_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating the sampler's pinned buffers");
  }
  if (auto err = sample_out_host.reserve(out_bytes); err != cudaSuccess) {
    return cuda_error(err, "allocating the sampler's pinned buffers");
  }
  auto* host_in = sample_in_host.as<unsigned char>();
  std::memcpy(host_in, in.rows.data(), rows_bytes);
  if (!in.edits.empty())
    std::memcpy(host_in + edits_at, in.edits.data(),
                in.edits.size() * sizeof(sampling::DeviceSampleEdit));
  if (!in.masks.empty()) std::memcpy(host_in + masks_at, in.masks.data(), in.masks.size() * 4);
  // Uploaded on a stream of its own, so the copy overlaps the forward pass still running on
  // `stream` (a constrained step at batch 32 on a 128K vocabulary uploads 512 KB of masks);
  // the sampling kernel waits for it. The previous sample() synchronized `stream`, so its
  // kernel no longer reads sample_in, and the stream synchronization below covers the
  // upload (through the event) before sample_in_host is written again.
  cudaStream_t upload = upload_stream != nullptr ? upload_stream : stream;
  if (auto err =
          cudaMemcpyAsync(sample_in.get(), host_in, in_bytes, cudaMemcpyHostToDevice, upload);
      err != cudaSuccess) {
    return cuda_error(err, "uploading the sampler's rows");
  }
  if (upload != stream) {
    if (auto err = cudaEventRecord(upload_event, upload); err != cudaSuccess) {
      return cuda_error(err, "recording the sampler's upload");
    }
    if (auto err = cudaStreamWaitEvent(stream, upload_event, 0); err != cudaSuccess) {
      return cuda_error(err, "ordering the sampler after its upload");
    }
  }
  auto* dev_in = sample_in.as<unsigned char>();
  auto* dev_out = sample_out.as<unsigned char>();
  cuda::SampleArgs args;
  args.logits = logits.as<float>();
  args.work = sample_work.as<float>();
  args.vocab = V;
  args.rows = reinterpret_cast<const sampling::DeviceSampleRow*>(dev_in);
  args.num_rows = n;
  args.edits = reinterpret_cast<const sampling::DeviceSampleEdit*>(dev_in + edits_at);
  args.masks = reinterpret_cast<const std::uint32_t*>(dev_in + masks_at);
  args.results = reinterpret_cast<DeviceSampleResult*>(dev_out);
  args.candidates = reinterpret_cast<DeviceCandidate*>(dev_out + cand_at);
  args.top = reinterpret_cast<DeviceCandidate*>(dev_out + top_at);
  cuda::sample_rows(args, stream);
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    return cuda_error(err, "launching the sampler");
  }
  auto* host_out = sample_out_host.as<unsigned char>();
  if (auto err = cudaMemcpyAsync(host_out, dev_out, head_bytes, cudaMemcpyDeviceToHost, stream);
      err != cudaSuccess) {
    return cuda_error(err, "copying the sampled tokens to the host");
  }
  if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return cuda_error(err, "running the step");
  }
  std::memcpy(out.results.data(), host_out, in.rows.size() * sizeof(DeviceSampleResult));
  out.top.resize(top_count);
  std::memcpy(out.top.data(), host_out + top_at, top_count * sizeof(DeviceCandidate));
  // The rows' candidates, packed row after row with `width` entries each.
  std::size_t width = 0;
  for (const auto& r : out.results) {
    if (r.offset >= 0 && r.candidates > 0) {
      width = std::max(width, std::min(per_row, static_cast<std::size_t>(r.candidates)));
    }
  }
  if (width > 0) {
    const std::size_t pitch = per_row * sizeof(DeviceCandidate);
    if (auto err = cudaMemcpy2DAsync(host_out + cand_at, width * sizeof(DeviceCandidate),
                                     dev_out + cand_at, pitch, width * sizeof(DeviceCandidate),
                                     in.rows.size(), cudaMemcpyDeviceToHost, stream);
        err != cudaSuccess) {
      return cuda_error(err, "copying the sampler's candidates to the host");
    }
    if (auto err = cudaStreamSynchronize(stream); err != cudaSuccess) {
      return cuda_error(err, "running the step");
    }
  }
  out.candidates.resize(in.rows.size() * width);
  if (width > 0) {
    std::memcpy(out.candidates.data(), host_out + cand_at,
                out.candidates.size() * sizeof(DeviceCandidate));
  }
  for (std::size_t k = 0; k < out.results.size(); ++k) {
    if (out.results[k].offset >= 0) out.results[k].offset = static_cast<std::int32_t>(k * width);
  }
  for (std::size_t k = 0; k < in.rows.size(); ++k) {
    if (out.results[k].status != DeviceSampleStatus::kHostRow) continue;
    auto& row = out.host_rows[k];
    row.resize(static_cast<std::size_t>(V));
    if (auto err = cudaMemcpy(row.data(),
                              logits.as<float>() + static_cast<std::size_t>(in.rows[k].row) * V,
                              static_cast<std::size_t>(V) * 4, cudaMemcpyDeviceToHost);
        err != cudaSuccess) {
      return cuda_error(err, "copying a logits row to the host");
    }
  }
  return {};
}

}  // namespace weft::model
