#include "runtime/parallel/nccl_pipeline.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model/cuda/device_buffer.hpp"
#include "runtime/parallel/nccl_communicator.hpp"
#include "weft/log.hpp"

namespace weft::parallel {
namespace {

using model::cuda_detail::DeviceBuffer;
using model::cuda_detail::PinnedBuffer;

Error cuda_failure(const char* what, cudaError_t rc) {
  return Error(ErrorCode::kInternal,
               std::string("pipeline over NCCL: ") + what + ": " + cudaGetErrorString(rc));
}

// WEFT_PP_TRANSPORT: 0 auto, 1 host, 2 nccl; -1 for anything else.
int transport_choice() {
  const char* v = std::getenv("WEFT_PP_TRANSPORT");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return 0;
  if (std::strcmp(v, "host") == 0) return 1;
  if (std::strcmp(v, "nccl") == 0) return 2;
  return -1;
}

// What each rank tells the others before the links are made, as floats of exact small
// integers (the host communicator gathers floats): whether it can use NCCL (1; 0: no; -1: its
// stage is not on a GPU), what it was asked
// for, and which GPU it is on (a hash of the host name in three 16-bit parts, the PCI domain,
// bus and device).
constexpr std::size_t kFacts = 8;
std::array<float, kFacts> my_facts(int device, int choice) {
  std::array<float, kFacts> f{};
  f[0] = nccl_available() ? 1.0f : 0.0f;
  f[1] = static_cast<float>(choice);
  char host[256] = {};
  (void)gethostname(host, sizeof host - 1);
  const auto hash = static_cast<std::uint64_t>(std::hash<std::string>{}(host));
  for (int k = 0; k < 3; ++k)
    f[2 + k] = static_cast<float>((hash >> (16 * k)) & 0xffff);
  int domain = -1, bus = -1, dev = -1;
  if (cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&dev, cudaDevAttrPciDeviceId, device) != cudaSuccess) {
    cudaGetLastError();
    f[0] = 0.0f;  // no GPU identity, no NCCL
  }
  f[5] = static_cast<float>(domain & 0xffff);
  f[6] = static_cast<float>(bus);
  f[7] = static_cast<float>(dev);
  return f;
}

// A message slot (one per micro-batch): its device buffer and the events that order its
// writer (the stage's stream), sender or receiver (a link's stream) and reader.
struct Slot {
  DeviceBuffer in, out;            // received input; output to send
  cudaEvent_t received = nullptr;  // on the receiving link's stream, after the recv
  cudaEvent_t computed = nullptr;  // on the stage's stream, after its part of the step
  cudaEvent_t sent = nullptr;      // on the sending link's stream, after the send
};

class NcclStageLinks final : public DeviceStageLinks {
 public:
  NcclStageLinks(const PipelinePlace& place, int device, cudaStream_t compute)
      : place_(place), device_(device), compute_(compute) {}
  ~NcclStageLinks() override {
    cudaSetDevice(device_);
    for (cudaStream_t s : {compute_, recv_stream_, send_stream_, logits_stream_})
      if (s != nullptr) cudaStreamSynchronize(s);
    // The NCCL communicators before the MPI groups they were bootstrapped over.
    in_.reset();
    out_.reset();
    head_.reset();
    for (auto& slot : slots_) {
      for (cudaEvent_t e : {slot.received, slot.computed, slot.sent})
        if (e != nullptr) cudaEventDestroy(e);
    }
    for (cudaEvent_t e : {logits_ready_, logits_read_})
      if (e != nullptr) cudaEventDestroy(e);
    for (auto& d : deferred_) {
      for (cudaEvent_t e : {d.ready, d.read})
        if (e != nullptr) cudaEventDestroy(e);
    }
    for (cudaStream_t s : {recv_stream_, send_stream_, logits_stream_})
      if (s != nullptr) cudaStreamDestroy(s);
  }

  // The setup, collective over the world: the MPI splits (every rank, in the same order), then
  // for each two-rank group the NCCL communicator on its own stream.
  Result<void> connect(Communicator& world) {
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) {
      return cuda_failure("cudaSetDevice", rc);
    }
    for (cudaStream_t* s : {&recv_stream_, &send_stream_, &logits_stream_}) {
      if (auto rc = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); rc != cudaSuccess) {
        return cuda_failure("cudaStreamCreate", rc);
      }
    }
    for (cudaEvent_t* e : {&logits_ready_, &logits_read_}) {
      if (auto rc = cudaEventCreateWithFlags(e, cudaEventDisableTiming); rc != cudaSuccess) {
        return cuda_failure("cudaEventCreate", rc);
      }
    }
    const int s = place_.stage, t = place_.tp_rank, N = place_.tensor_parallel;
    const int head_rank = place_.world_rank(place_.stages - 1, 0);
    // Links s -> s + 1 for even s, then for odd s: each rank is in one group of each split
    // (alone where it has no such link), key = stage so the earlier stage is group rank 0.
    for (int parity = 0; parity < 2; ++parity) {
      const int color = ((s + parity) / 2) * N + t;
      auto group = world.split(color, s);
      if (!group) return group.error();
      if ((*group)->size() != 2) continue;
      const bool sender = (s + parity) % 2 == 0;  // the earlier stage of the pair
      cudaStream_t stream = sender ? send_stream_ : recv_stream_;
      auto nccl = make_nccl_communicator(**group, device_, stream);
      if (!nccl) return nccl.error();
      if (auto ok = warm_up(**nccl, sender, stream); !ok) return ok;
      (sender ? out_group_ : in_group_) = std::move(*group);
      (sender ? out_ : in_) = std::move(*nccl);
    }
    // The logits: the last stage's tp rank 0 (group rank 1) to world rank 0 (group rank 0).
    const bool in_head = world.rank() == 0 || world.rank() == head_rank;
    auto group = world.split(in_head ? 0 : 1 + world.rank(), world.rank() == 0 ? 0 : 1);
    if (!group) return group.error();
    if (in_head && (*group)->size() == 2) {
      cudaStream_t stream = world.rank() == 0 ? logits_stream_ : send_stream_;
      auto nccl = make_nccl_communicator(**group, device_, stream);
      if (!nccl) return nccl.error();
      if (auto ok = warm_up(**nccl, world.rank() != 0, stream); !ok) return ok;
      head_group_ = std::move(*group);
      head_ = std::move(*nccl);
    }
    return {};
  }

  std::string description() const override {
    return "device buffers over NCCL (ncclSend/ncclRecv between the stages' GPUs, a stream per "
           "link)";
  }

  Result<void> forward(model::StageForward& stage, const std::vector<model::StepBatch>& parts,
                       std::vector<float>& logits, Communicator* tensor_group,
                       bool logits_on_device) override {
    logits.clear();
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) {
      return cuda_failure("cudaSetDevice", rc);
    }
    const auto V = static_cast<std::size_t>(stage.spec().vocab_size);
    const bool last = place_.stage + 1 == place_.stages;
    const bool gets_logits = head_ != nullptr && !last;  // world rank 0
    std::size_t rows = 0;
    for (const auto& mb : parts)
      rows += static_cast<std::size_t>(mb.logit_rows());
    if (gets_logits) {
      // Every piece's logits land in one device buffer, in order, as they come; one copy to
      // pinned memory after the last (both sized here, before this step sends anything). The
      // step before has been read (the host waited for it).
      if (auto ok = grow(logits_dev_, rows * V * 4); !ok) return ok;
      if (auto rc = logits_host_.reserve(rows * V * 4); rc != cudaSuccess) {
        return cuda_failure("allocating pinned logits", rc);
      }
    }
    // The logits land once the sampler has read the step before's; each piece's receive is
    // enqueued right after the piece is sent (enqueue_parts).
    if (gets_logits) cudaStreamWaitEvent(logits_stream_, logits_read_, 0);
    if (auto ok = enqueue_parts(stage, parts, tensor_group,
                                gets_logits ? logits_dev_.as<float>() : nullptr);
        !ok) {
      return ok;
    }
    if (gets_logits) {
      if (logits_on_device) {
        // Into the stage's sampler, on its stream, once they are here: no host wait.
        cudaEventRecord(logits_ready_, logits_stream_);
        cudaStreamWaitEvent(compute_, logits_ready_, 0);
        if (auto ok = stage.adopt_logits(logits_dev_.as<float>(), static_cast<int>(rows)); !ok) {
          return ok;
        }
        cudaEventRecord(logits_read_, compute_);
        if (auto rc = cudaGetLastError(); rc != cudaSuccess) return cuda_failure("a step", rc);
        return {};
      }
      if (auto rc = cudaMemcpyAsync(logits_host_.get(), logits_dev_.get(), rows * V * 4,
                                    cudaMemcpyDeviceToHost, logits_stream_);
          rc != cudaSuccess) {
        return cuda_failure("copying the logits to the host", rc);
      }
      if (auto rc = cudaEventRecord(logits_ready_, logits_stream_); rc != cudaSuccess) {
        return cuda_failure("cudaEventRecord", rc);
      }
    }
    if (auto rc = cudaGetLastError(); rc != cudaSuccess) return cuda_failure("a step", rc);
    if (gets_logits) {
      if (auto rc = cudaEventSynchronize(logits_ready_); rc != cudaSuccess) {
        return cuda_failure("waiting for the logits", rc);
      }
      const auto* host = logits_host_.as<float>();
      logits.assign(host, host + rows * V);
    }
    return {};
  }

  bool defers_logits() const override {
    return head_ != nullptr && place_.stage + 1 < place_.stages;
  }

  // World rank 0 with steps in flight: the step enqueued as forward() does it, its logits
  // received into a buffer of the step's own (one per step in flight) on the logits stream;
  // no host wait. take_logits() takes the oldest one's.
  Result<void> forward_deferred(model::StageForward& stage,
                                const std::vector<model::StepBatch>& parts,
                                Communicator* tensor_group) override {
    if (!defers_logits()) {
      return Error(ErrorCode::kInternal, "pipeline over NCCL: only world rank 0 defers logits");
    }
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) {
      return cuda_failure("cudaSetDevice", rc);
    }
    const auto V = static_cast<std::size_t>(stage.spec().vocab_size);
    std::size_t rows = 0;
    for (const auto& mb : parts)
      rows += static_cast<std::size_t>(mb.logit_rows());
    // A buffer no step in flight holds, sized before anything of this step is enqueued (a
    // buffer that grows waits for the whole device).
    std::size_t k = 0;
    while (k < deferred_.size() && deferred_[k].busy)
      ++k;
    if (k == deferred_.size()) {
      Deferred d;
      for (cudaEvent_t* e : {&d.ready, &d.read}) {
        if (auto rc = cudaEventCreateWithFlags(e, cudaEventDisableTiming); rc != cudaSuccess) {
          return cuda_failure("cudaEventCreate", rc);
        }
      }
      deferred_.push_back(std::move(d));
    }
    Deferred& d = deferred_[k];
    if (auto ok = grow(d.dev, std::max<std::size_t>(rows * V * 4, 4)); !ok) return ok;
    if (auto rc = d.host.reserve(std::max<std::size_t>(rows * V * 4, 4)); rc != cudaSuccess) {
      return cuda_failure("allocating pinned logits", rc);
    }
    // Once the buffer's last logits were read; each piece's receive after its send, as in
    // forward().
    cudaStreamWaitEvent(logits_stream_, d.read, 0);
    if (auto ok = enqueue_parts(stage, parts, tensor_group, d.dev.as<float>()); !ok) return ok;
    if (auto rc = cudaEventRecord(d.ready, logits_stream_); rc != cudaSuccess) {
      return cuda_failure("cudaEventRecord", rc);
    }
    if (auto rc = cudaGetLastError(); rc != cudaSuccess) return cuda_failure("a step", rc);
    d.busy = true;
    d.rows = rows;
    deferred_order_.push_back(k);
    return {};
  }

  Result<void> take_logits(model::StageForward& stage, std::vector<float>& logits,
                           bool on_device) override {
    logits.clear();
    if (deferred_order_.empty()) {
      return Error(ErrorCode::kInternal, "pipeline over NCCL: no deferred step to take");
    }
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) {
      return cuda_failure("cudaSetDevice", rc);
    }
    Deferred& d = deferred_[deferred_order_.front()];
    deferred_order_.pop_front();
    d.busy = false;
    const auto V = static_cast<std::size_t>(stage.spec().vocab_size);
    if (on_device) {
      // Into the stage's sampler on its stream once they are here: no host wait.
      cudaStreamWaitEvent(compute_, d.ready, 0);
      if (auto ok = stage.adopt_logits(d.dev.as<float>(), static_cast<int>(d.rows)); !ok) {
        return ok;
      }
      cudaEventRecord(d.read, compute_);
      if (auto rc = cudaGetLastError(); rc != cudaSuccess) return cuda_failure("a step", rc);
      return {};
    }
    if (auto rc = cudaMemcpyAsync(d.host.get(), d.dev.get(), d.rows * V * 4, cudaMemcpyDeviceToHost,
                                  logits_stream_);
        rc != cudaSuccess) {
      return cuda_failure("copying the logits to the host", rc);
    }
    cudaEventRecord(d.read, logits_stream_);
    if (auto rc = cudaEventSynchronize(d.read); rc != cudaSuccess) {
      return cuda_failure("waiting for the logits", rc);
    }
    const auto* host = d.host.as<float>();
    logits.assign(host, host + d.rows * V);
    return {};
  }

 private:
  // For each micro-batch: receive its input from the stage before (unless this stage embeds),
  // run the stage's layers on it, and send the output on (the last stage's tp rank 0 sends
  // logits to world rank 0); each on its own stream, ordered by the slot's events. On world
  // rank 0 (`logits_to` not null) the piece's logits receive follows its send at once, into
  // logits_to after the pieces before's rows, on the logits stream.
  //
  // Why at once, not after the last piece's send: a host wait inside a later piece (a message
  // buffer or a step buffer of the stage that grows: a device-wide synchronize, cudaFree's
  // included) then waits only for messages whose both ends are enqueued. With the receives
  // after the last send, from three pieces on the last stage could wait, growing piece i's
  // input buffer, for its piece i - 1 logits to be received, while this rank waited, growing
  // piece i + 1's, for the last stage to receive piece i: a deadlock (docs/notes/ppgroups_gpu.md).
  Result<void> enqueue_parts(model::StageForward& stage, const std::vector<model::StepBatch>& parts,
                             Communicator* tensor_group, float* logits_to) {
    const auto& spec = stage.spec();
    const auto H = static_cast<std::size_t>(spec.hidden_size);
    const auto V = static_cast<std::size_t>(spec.vocab_size);
    const bool first = place_.stage == 0, last = place_.stage + 1 == place_.stages;
    const bool sends_logits = last && place_.tp_rank == 0;  // to world rank 0 (not this rank)
    if (auto ok = make_slots(parts.size()); !ok) return ok;
    std::size_t logits_at = 0;  // floats of logits_to taken by the pieces before
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& mb = parts[i];
      Slot& slot = slots_[i];
      const auto hidden = mb.tokens.size() * H;
      const float* in = nullptr;
      if (!first) {
        if (auto ok = grow(slot.in, hidden * 4); !ok) return ok;
        // The stage has read this slot's last message (its step before) before a new one lands.
        cudaStreamWaitEvent(recv_stream_, slot.computed, 0);
        if (auto ok =
                in_->recv(std::as_writable_bytes(std::span<float>(slot.in.as<float>(), hidden)), 0);
            !ok) {
          return ok;
        }
        cudaEventRecord(slot.received, recv_stream_);
        cudaStreamWaitEvent(compute_, slot.received, 0);
        in = slot.in.as<float>();
      }
      float* out = nullptr;
      std::size_t out_floats = 0;
      if (!last || sends_logits) {
        out_floats = last ? static_cast<std::size_t>(mb.logit_rows()) * V : hidden;
        if (auto ok = grow(slot.out, out_floats * 4); !ok) return ok;
        // The slot's last message has left before the stage writes the next one there.
        cudaStreamWaitEvent(compute_, slot.sent, 0);
        out = slot.out.as<float>();
      }
      if (auto ok = stage.enqueue(mb, in, out, tensor_group); !ok) return ok;
      cudaEventRecord(slot.computed, compute_);
      if (out != nullptr && out_floats > 0) {  // a piece may need no logits (a prefill chunk)
        cudaStreamWaitEvent(send_stream_, slot.computed, 0);
        Communicator& link = last ? *head_ : *out_;
        if (auto ok =
                link.send(std::as_bytes(std::span<const float>(out, out_floats)), last ? 0 : 1);
            !ok) {
          return ok;
        }
        cudaEventRecord(slot.sent, send_stream_);
      }
      // A piece with no logit rows (a prefill chunk): the last stage sends nothing for it.
      const auto logit_floats = static_cast<std::size_t>(mb.logit_rows()) * V;
      if (logits_to != nullptr && logit_floats > 0) {
        if (auto ok = head_->recv(
                std::as_writable_bytes(std::span<float>(logits_to + logits_at, logit_floats)), 1);
            !ok) {
          return ok;
        }
        logits_at += logit_floats;
      }
    }
    return {};
  }

  // A deferred step's logits (forward_deferred): received on the logits stream (ready), read
  // by the sampler or the copy to the host (read) before the buffer takes another step's.
  struct Deferred {
    DeviceBuffer dev;
    PinnedBuffer host;
    cudaEvent_t ready = nullptr, read = nullptr;
    std::size_t rows = 0;
    bool busy = false;
  };

  // NCCL connects a pair of ranks at their first send and receive, and the caller waits for
  // the peer there: one small message per link, while both ranks are here, so that no step
  // waits on a connection its peer makes only after another one.
  Result<void> warm_up(Communicator& link, bool sender, cudaStream_t stream) {
    DeviceBuffer word;
    if (auto rc = word.reserve(4); rc != cudaSuccess) return cuda_failure("cudaMalloc", rc);
    std::span<std::byte> bytes(static_cast<std::byte*>(word.get()), 4);
    // The peer is the other rank of the two, whichever end sends: the logits link's sender is
    // its group rank 1 (the last stage), a stage link's is group rank 0 (the earlier stage).
    const int peer = 1 - link.rank();
    if (auto ok = sender ? link.send(bytes, peer) : link.recv(bytes, peer); !ok) return ok;
    if (auto rc = cudaStreamSynchronize(stream); rc != cudaSuccess) {
      return cuda_failure("connecting a link", rc);
    }
    return {};
  }

  Result<void> make_slots(std::size_t count) {
    while (slots_.size() < count) {
      Slot slot;
      for (cudaEvent_t* e : {&slot.received, &slot.computed, &slot.sent}) {
        if (auto rc = cudaEventCreateWithFlags(e, cudaEventDisableTiming); rc != cudaSuccess) {
          return cuda_failure("cudaEventCreate", rc);
        }
      }
      slots_.push_back(std::move(slot));
    }
    return {};
  }
  // Grows a message buffer to at least `bytes` (a power of two, so that the stages' CUDA
  // graphs, keyed by these addresses, seldom change), after every stream is done with it.
  Result<void> grow(DeviceBuffer& buffer, std::size_t bytes) {
    if (buffer.get() != nullptr && buffer.bytes() >= bytes) return {};
    std::size_t size = 4096;
    while (size < bytes)
      size *= 2;
    if (auto rc = cudaDeviceSynchronize(); rc != cudaSuccess) {
      return cuda_failure("waiting before a buffer grows", rc);
    }
    if (auto rc = buffer.reserve(size); rc != cudaSuccess) {
      return cuda_failure("allocating a message buffer", rc);
    }
    return {};
  }

  PipelinePlace place_;
  int device_;
  cudaStream_t compute_;  // the stage's (its model's stream)
  cudaStream_t recv_stream_ = nullptr, send_stream_ = nullptr, logits_stream_ = nullptr;
  // The MPI groups each NCCL link was bootstrapped over outlive it (declared first).
  std::unique_ptr<Communicator> in_group_, out_group_, head_group_;
  std::unique_ptr<Communicator> in_, out_, head_;  // from the stage before, to the next, logits
  std::vector<Slot> slots_;
  DeviceBuffer logits_dev_;
  PinnedBuffer logits_host_;
  cudaEvent_t logits_ready_ = nullptr;      // on logits_stream_: the step's logits are here
  cudaEvent_t logits_read_ = nullptr;       // on the stage's stream: its sampler has copied them
  std::vector<Deferred> deferred_;          // world rank 0's deferred steps' logits
  std::deque<std::size_t> deferred_order_;  // in flight, oldest first
};

}  // namespace

Result<std::unique_ptr<DeviceStageLinks>> make_nccl_stage_links(Communicator& world,
                                                                const PipelinePlace& place,
                                                                model::StageForward& stage) {
  const int device = stage.cuda_device();
  const int choice = transport_choice();
  // Every rank learns every rank's facts and takes the same decision from them.
  std::array<float, kFacts> mine{};
  if (device >= 0) {
    mine = my_facts(device, choice);
  } else {
    mine[0] = -1.0f;  // not on a GPU
    mine[1] = static_cast<float>(choice);
  }
  std::vector<float> all(kFacts * static_cast<std::size_t>(world.size()));
  if (auto ok = world.all_gather(mine, all); !ok) return ok.error();
  std::string why;  // why the host path, when it is taken
  bool forced = false;
  for (int r = 0; r < world.size(); ++r) {
    const float* f = all.data() + kFacts * static_cast<std::size_t>(r);
    if (f[1] < 0) {
      return Error(ErrorCode::kInvalidArgument, "WEFT_PP_TRANSPORT (rank " + std::to_string(r) +
                                                    "): expected auto, host or nccl");
    }
    forced |= f[1] == 2.0f;
    if (f[1] == 1.0f && why.empty()) why = "WEFT_PP_TRANSPORT=host";
    if (f[0] < 0.0f && why.empty()) why = "rank " + std::to_string(r) + "'s stage is not on a GPU";
    if (f[0] == 0.0f && why.empty()) {
      std::string reason;
      (void)nccl_available(&reason);
      why = "rank " + std::to_string(r) + " cannot use NCCL" +
            (r == world.rank() && !reason.empty() ? " (" + reason + ")" : std::string());
    }
    for (int q = 0; q < r && why.empty(); ++q) {
      const float* g = all.data() + kFacts * static_cast<std::size_t>(q);
      if (std::memcmp(f + 2, g + 2, 6 * sizeof(float)) == 0) {
        why = "ranks " + std::to_string(q) + " and " + std::to_string(r) +
              " share a GPU, and NCCL joins one rank per GPU";
      }
    }
  }
  if (!why.empty()) {
    if (forced) {
      return Error(ErrorCode::kUnsupported,
                   "WEFT_PP_TRANSPORT=nccl, but the stages cannot use NCCL: " + why);
    }
    if (world.rank() == 0) {
      log_info("pipeline: stages exchange host buffers over " + world.name() + " (" + why + ")");
    }
    return std::unique_ptr<DeviceStageLinks>();
  }
  auto links = std::make_unique<NcclStageLinks>(place, device,
                                                static_cast<cudaStream_t>(stage.cuda_stream()));
  if (auto ok = links->connect(world); !ok) return ok.error();
  return std::unique_ptr<DeviceStageLinks>(std::move(links));
}

}  // namespace weft::parallel
