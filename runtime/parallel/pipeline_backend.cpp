#include "runtime/parallel/pipeline_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "weft/log.hpp"

namespace weft::parallel {
namespace {

std::span<std::byte> bytes(std::vector<float>& v) {
  return std::as_writable_bytes(std::span<float>(v));
}

}  // namespace

PipelinePlace pipeline_place(int rank, int tensor_parallel, int stages) {
  PipelinePlace p;
  p.tensor_parallel = tensor_parallel;
  p.stages = stages;
  p.stage = rank / tensor_parallel;
  p.tp_rank = rank % tensor_parallel;
  return p;
}

Result<std::unique_ptr<PipelineBackend>> PipelineBackend::create(
    std::unique_ptr<model::StageForward> stage, Communicator& world, PipelinePlace place,
    int micro_batches, DeviceLinksFactory device_links, int groups) {
  if (world.device_buffers()) {
    return Error(ErrorCode::kInvalidArgument, "pipeline: stages exchange host buffers; the " +
                                                  world.name() +
                                                  " communicator wants device buffers");
  }
  if (world.size() != place.stages * place.tensor_parallel) {
    return Error(ErrorCode::kInvalidArgument,
                 "pipeline: " + std::to_string(place.stages) + " stages x " +
                     std::to_string(place.tensor_parallel) + " tensor-parallel ranks need " +
                     std::to_string(place.stages * place.tensor_parallel) + " processes, not " +
                     std::to_string(world.size()));
  }
  if (place.world_rank(place.stage, place.tp_rank) != world.rank()) {
    return Error(ErrorCode::kInvalidArgument, "pipeline: rank " + std::to_string(world.rank()) +
                                                  " is not stage " + std::to_string(place.stage) +
                                                  ", tp rank " + std::to_string(place.tp_rank));
  }
  if (stage->embeds() != (place.stage == 0) || stage->ends() != (place.stage + 1 == place.stages)) {
    return Error(ErrorCode::kInvalidArgument,
                 "pipeline: stage " + std::to_string(place.stage) + " of " +
                     std::to_string(place.stages) + " holds layers from " +
                     std::to_string(stage->layers().begin) + ", count " +
                     std::to_string(stage->layers().count));
  }
  if (micro_batches < 1) {
    return Error(ErrorCode::kInvalidArgument, "pipeline: micro-batches must be at least 1, not " +
                                                  std::to_string(micro_batches));
  }
  if (groups < 1) {
    return Error(ErrorCode::kInvalidArgument,
                 "pipeline: groups must be at least 1, not " + std::to_string(groups));
  }
  return std::unique_ptr<PipelineBackend>(new PipelineBackend(
      std::move(stage), world, place, micro_batches, std::move(device_links), groups));
}

std::string PipelineBackend::transport() const {
  return links_ != nullptr ? links_->description() : "host buffers over " + world_.name();
}

PipelineBackend::~PipelineBackend() {
  links_.reset();
  (void)world_.wait_sends();
}

bool PipelineBackend::samples_on_device() const noexcept {
  static const bool allowed = [] {
    const char* v = std::getenv("WEFT_PP_DEVICE_SAMPLING");
    return v == nullptr || std::string(v) != "0";
  }();
  return allowed && world_.rank() == 0 && stage_->samples_on_device();
}

Result<void> PipelineBackend::forward(const model::StepBatch& batch, std::vector<float>& logits) {
  return step(batch, logits, false);
}

Result<void> PipelineBackend::launch(const model::StepBatch& batch) {
  if (!samples_on_device()) return ForwardBackend::launch(batch);
  return step(batch, launched_, true);
}

Result<std::vector<model::StepBatch>> PipelineBackend::begin_step(const model::StepBatch& batch) {
  const auto& spec = stage_->spec();
  // Every rank checks the whole batch before anything is sent, so a bad batch fails on every
  // rank alike instead of leaving a later stage waiting for a message that never comes.
  {
    model::KvLayout any;
    any.num_layers = spec.num_layers;
    any.num_kv_heads = spec.num_kv_heads;
    any.head_dim = spec.head_dim;
    any.page_size = stage_->page_size();
    if (auto ok = model::check_step_batch(spec, batch, any, num_pages()); !ok) return ok.error();
  }
  if (place_.tensor_parallel > 1 && tensor_group_ == nullptr) {
    auto group = world_.split(place_.stage, place_.tp_rank);
    if (!group) return group.error();
    tensor_group_ = std::move(group.value());
  }
  if (make_links_ && place_.stages > 1) {
    // Collective: every rank asks at its first step, after the group split above.
    auto made = make_links_(world_, place_, *stage_);
    make_links_ = nullptr;
    if (!made) return made.error();
    links_ = std::move(made.value());
    if (links_ != nullptr && world_.rank() == 0) {
      log_info("pipeline: stages exchange " + links_->description());
    }
  }
  int count = micro_batches_;
  if (stage_->cuda_device() >= 0) {
    // On GPUs a decode step reads every weight once per micro-batch, so a piece must hold
    // enough tokens to be worth it: micro-batches of at least WEFT_PP_MICRO_TOKENS (128).
    // Every rank's stage is on a GPU alike, so every rank cuts the step alike.
    static const long long min_tokens = [] {
      const char* v = std::getenv("WEFT_PP_MICRO_TOKENS");
      return v != nullptr && *v != '\0' ? std::max(1LL, std::atoll(v)) : 128LL;
    }();
    const auto by_tokens = static_cast<long long>(batch.tokens.size()) / min_tokens;
    count = static_cast<int>(std::clamp<long long>(by_tokens, 1, micro_batches_));
  }
  return model::split_micro_batches(batch, count);
}

// With steps in flight the leader sends each step's batch point to point (MPI_Isend of a copy,
// step_broadcast.cpp) instead of a blocking broadcast. A message past MPI's eager limit (Open
// MPI's shared memory: 4 KiB, a batch of about 500 tokens) may then complete only while the
// sender is inside an MPI call: Open MPI without a single-copy path (CMA) sends the rest of it
// when the receiver's answer is progressed on the sender. A rank whose stage runs on a GPU and
// meets other ranks there (the NCCL links, or its tensor-parallel group's all-reduces) waits
// for them in CUDA (a device or event synchronize: a buffer that grows, the step's metadata,
// the logits), not in MPI: had it not delivered the batch first, the follower would wait in
// MPI_Recv for it and this rank in CUDA for the follower's GPU, for ever (issue #20: the 8B
// folder's 512-token prefill steps; weft-tiny's batches were under the limit). Hence the batch
// is delivered before the step is enqueued. A follower that is not busy takes it at once; one
// still busy is at most enqueuing its earlier step (on GPU stages a rank's host runs ahead of
// its GPU). The same holds for a GPU stage's own sends through host memory (a hybrid's
// residual stream or logits) before its next all-reduces. Ranks that meet the others only in
// MPI calls (CPU stages; GPU stages through host memory without a tensor-parallel group)
// progress their sends there, and keep going without waiting: their overlap depends on it.
Result<void> PipelineBackend::deliver_sends_before_device_waits() {
  const bool waits_in_cuda =
      links_ != nullptr || (tensor_group_ != nullptr && stage_->cuda_device() >= 0);
  if (!waits_in_cuda) return {};
  return world_.wait_sends();
}

Result<void> PipelineBackend::run_parts(const std::vector<model::StepBatch>& parts,
                                        std::vector<float>& logits) {
  const auto H = static_cast<std::size_t>(stage_->spec().hidden_size);
  const bool first = place_.stage == 0, last = place_.stage + 1 == place_.stages;
  const int prev = first ? -1 : place_.world_rank(place_.stage - 1, place_.tp_rank);
  const int next = last ? -1 : place_.world_rank(place_.stage + 1, place_.tp_rank);
  const bool leader = world_.rank() == 0;
  for (const auto& mb : parts) {
    in_.clear();
    if (!first) {
      in_.resize(mb.tokens.size() * H);
      if (auto ok = world_.recv(bytes(in_), prev); !ok) return ok;
    }
    if (auto ok = stage_->forward(mb, in_, out_, tensor_group_.get()); !ok) return ok;
    if (!last) {
      if (auto ok = world_.send(bytes(out_), next); !ok) return ok;
    } else if (leader) {
      logits.insert(logits.end(), out_.begin(), out_.end());  // one stage only
    } else if (place_.tp_rank == 0) {
      if (auto ok = world_.send(bytes(out_), 0); !ok) return ok;
    }
  }
  return {};
}

Result<void> PipelineBackend::step(const model::StepBatch& batch, std::vector<float>& logits,
                                   bool logits_on_device) {
  logits.clear();
  auto parts = begin_step(batch);
  if (!parts) return parts.error();
  if (auto ok = deliver_sends_before_device_waits(); !ok) return ok;
  if (links_ != nullptr) {
    return links_->forward(*stage_, *parts, logits, tensor_group_.get(), logits_on_device);
  }
  if (auto ok = run_parts(*parts, logits); !ok) return ok;
  const auto V = static_cast<std::size_t>(stage_->spec().vocab_size);
  const bool leader = world_.rank() == 0, last = place_.stage + 1 == place_.stages;
  if (leader && !last) {
    const int head_rank = place_.world_rank(place_.stages - 1, 0);
    logits.reserve(static_cast<std::size_t>(batch.logit_rows()) * V);
    for (const auto& mb : *parts) {
      received_.resize(static_cast<std::size_t>(mb.logit_rows()) * V);
      if (auto ok = world_.recv(bytes(received_), head_rank); !ok) return ok;
      logits.insert(logits.end(), received_.begin(), received_.end());
    }
  }
  // With steps in flight, a rank's sends may wait for a peer that is still behind (rank 0
  // receives a step's logits only after it submitted the next group's step): they complete
  // as later sends and the communicator's own end reap them.
  if (groups_ <= 1) {
    if (auto ok = world_.wait_sends(); !ok) return ok;
  }
  if (logits_on_device && leader) {
    return stage_->adopt_logits(logits.data(), batch.logit_rows());
  }
  return {};
}

Result<void> PipelineBackend::submit(const model::StepBatch& batch) {
  if (world_.rank() != 0 || groups_ <= 1) {
    return Error(ErrorCode::kInternal,
                 "pipeline: only world rank 0 of a pipeline with groups submits steps");
  }
  if (static_cast<int>(in_flight_.size()) >= groups_) {
    return Error(ErrorCode::kInternal, "pipeline: " + std::to_string(groups_) +
                                           " steps are in flight already; collect one first");
  }
  auto parts = begin_step(batch);
  if (!parts) return parts.error();
  if (auto ok = deliver_sends_before_device_waits(); !ok) return ok;
  InFlight f;
  f.rows = batch.logit_rows();
  if (links_ != nullptr && links_->defers_logits()) {
    // Enqueued on the stage's GPU and its links; the logits land in a buffer of the step's own.
    if (auto ok = links_->forward_deferred(*stage_, *parts, tensor_group_.get()); !ok) return ok;
    f.deferred = true;
  } else if (links_ != nullptr) {
    // Links that run a step to its end: its logits wait here for collect().
    if (auto ok = links_->forward(*stage_, *parts, f.logits, tensor_group_.get(), false); !ok) {
      return ok;
    }
    f.have_logits = true;
  } else {
    if (auto ok = run_parts(*parts, f.logits); !ok) return ok;
    f.have_logits = place_.stage + 1 == place_.stages;  // a pipeline of one stage
    for (const auto& mb : *parts)
      f.part_rows.push_back(mb.logit_rows());
  }
  in_flight_.push_back(std::move(f));
  return {};
}

Result<void> PipelineBackend::collect(std::vector<float>& logits, bool on_device) {
  logits.clear();
  if (in_flight_.empty()) {
    return Error(ErrorCode::kInternal, "pipeline: no step is in flight to collect");
  }
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (f.deferred) return links_->take_logits(*stage_, logits, on_device);
  std::vector<float>& out = on_device ? launched_ : logits;
  out.clear();
  if (f.have_logits) {
    out = std::move(f.logits);
  } else {
    const auto V = static_cast<std::size_t>(stage_->spec().vocab_size);
    const int head_rank = place_.world_rank(place_.stages - 1, 0);
    out.reserve(static_cast<std::size_t>(f.rows) * V);
    for (int rows : f.part_rows) {
      received_.resize(static_cast<std::size_t>(rows) * V);
      if (auto ok = world_.recv(bytes(received_), head_rank); !ok) return ok;
      out.insert(out.end(), received_.begin(), received_.end());
    }
  }
  if (on_device) return stage_->adopt_logits(out.data(), f.rows);
  return {};
}

}  // namespace weft::parallel
