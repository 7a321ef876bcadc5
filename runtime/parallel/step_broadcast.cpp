#include "runtime/parallel/step_broadcast.hpp"

#include <cstdint>
#include <vector>

namespace weft::parallel {
namespace {

// What the leader sends before each message's payload.
enum Kind : std::int64_t { kStop = 0, kStep = 1, kPool = 2 };
struct Header {
  std::int64_t kind = kStop;
  std::int64_t tokens = 0;
  std::int64_t sequences = 0;
  std::int64_t page_entries = 0;  // kPool: the page count
};

template <class T>
std::span<std::byte> bytes(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

// The leader's messages reach every follower by a broadcast, or (point_to_point) by a send
// to each, which returns at once; a follower receives them either way.
Result<void> deliver(Communicator& comm, std::span<std::byte> data, bool point_to_point) {
  if (!point_to_point) return comm.broadcast(data, 0);
  if (comm.rank() != 0) return comm.recv(data, 0);
  for (int r = 1; r < comm.size(); ++r) {
    if (auto ok = comm.send(data, r); !ok) return ok;
  }
  return {};
}

Result<void> send_header(Communicator& comm, Header& h, bool point_to_point) {
  return deliver(comm, std::as_writable_bytes(std::span<Header>(&h, 1)), point_to_point);
}

// The batch as int32s: tokens, positions, then per sequence kSequenceInts (begin, count,
// flags: all_logits 1, verify 2, compress_heads_vary 4, pages, and KV-Compress's slot offset,
// evicted slots and window), then every sequence's page ids.
constexpr std::int64_t kSequenceInts = 7;

std::vector<std::int32_t> pack(const model::StepBatch& b) {
  std::vector<std::int32_t> out(b.tokens.begin(), b.tokens.end());
  out.insert(out.end(), b.positions.begin(), b.positions.end());
  for (const auto& s : b.sequences) {
    out.insert(out.end(),
               {s.token_begin, s.token_count,
                (s.all_logits ? 1 : 0) | (s.verify ? 2 : 0) | (s.compress_heads_vary ? 4 : 0),
                static_cast<std::int32_t>(s.page_table.size()), s.slot_offset, s.compress_evict,
                s.compress_window});
  }
  for (const auto& s : b.sequences)
    out.insert(out.end(), s.page_table.begin(), s.page_table.end());
  return out;
}

Result<model::StepBatch> unpack(const Header& h, const std::vector<std::int32_t>& in) {
  model::StepBatch b;
  const auto T = static_cast<std::size_t>(h.tokens), S = static_cast<std::size_t>(h.sequences);
  auto at = in.begin();
  b.tokens.assign(at, at + static_cast<std::ptrdiff_t>(T));
  at += static_cast<std::ptrdiff_t>(T);
  b.positions.assign(at, at + static_cast<std::ptrdiff_t>(T));
  at += static_cast<std::ptrdiff_t>(T);
  std::vector<std::int32_t> pages(S);
  for (std::size_t s = 0; s < S; ++s, at += kSequenceInts) {
    b.sequences.push_back({at[0], at[1], {}, (at[2] & 1) != 0});
    auto& slice = b.sequences.back();
    slice.verify = (at[2] & 2) != 0;
    slice.compress_heads_vary = (at[2] & 4) != 0;
    pages[s] = at[3];
    slice.slot_offset = at[4];
    slice.compress_evict = at[5];
    slice.compress_window = at[6];
  }
  for (std::size_t s = 0; s < S; ++s) {
    if (pages[s] < 0 || in.end() - at < pages[s]) {
      return Error(ErrorCode::kInternal, "tensor parallel: a step's page tables are cut short");
    }
    b.sequences[s].page_table.assign(at, at + pages[s]);
    at += pages[s];
  }
  return b;
}

}  // namespace

Result<std::unique_ptr<TensorParallelLeader>> TensorParallelLeader::create(
    std::unique_ptr<model::ForwardBackend> local, Communicator& comm, bool point_to_point) {
  if (comm.rank() != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "tensor parallel: the leader is rank 0, not rank " + std::to_string(comm.rank()));
  }
  Header h{kPool, 0, 0, local->num_pages()};
  if (auto ok = send_header(comm, h, point_to_point); !ok) return ok.error();
  return std::unique_ptr<TensorParallelLeader>(
      new TensorParallelLeader(std::move(local), comm, point_to_point));
}

TensorParallelLeader::~TensorParallelLeader() {
  Header h{kStop, 0, 0, 0};
  (void)send_header(comm_, h, point_to_point_);
  if (point_to_point_) (void)comm_.wait_sends();
}

void stop_tensor_parallel_followers(Communicator& comm, bool point_to_point) {
  Header h{kStop, 0, 0, 0};
  (void)send_header(comm, h, point_to_point);
  if (point_to_point) (void)comm.wait_sends();
}

Result<void> TensorParallelLeader::forward(const model::StepBatch& batch,
                                           std::vector<float>& logits) {
  if (auto ok = send(batch); !ok) return ok;
  return local_->forward(batch, logits);
}

Result<void> TensorParallelLeader::launch(const model::StepBatch& batch) {
  if (auto ok = send(batch); !ok) return ok;
  return local_->launch(batch);
}

Result<void> TensorParallelLeader::submit(const model::StepBatch& batch) {
  if (auto ok = send(batch); !ok) return ok;
  return local_->submit(batch);
}

Result<void> TensorParallelLeader::send(const model::StepBatch& batch) {
  auto payload = pack(batch);
  std::int64_t entries = 0;
  for (const auto& s : batch.sequences)
    entries += static_cast<std::int64_t>(s.page_table.size());
  Header h{kStep, static_cast<std::int64_t>(batch.tokens.size()),
           static_cast<std::int64_t>(batch.sequences.size()), entries};
  // Sizes a follower cannot rebuild the batch from fail here, before anything is sent.
  if (batch.positions.size() != batch.tokens.size()) {
    return Error(ErrorCode::kInvalidArgument,
                 "step batch has " + std::to_string(batch.tokens.size()) + " tokens but " +
                     std::to_string(batch.positions.size()) + " positions");
  }
  if (auto ok = send_header(comm_, h, point_to_point_); !ok) return ok;
  return deliver(comm_, bytes(payload), point_to_point_);
}

Result<void> follow_tensor_parallel_leader(
    Communicator& comm,
    const std::function<Result<std::unique_ptr<model::ForwardBackend>>(int num_pages)>&
        make_backend,
    bool point_to_point) {
  Header h;
  if (auto ok = send_header(comm, h, point_to_point); !ok) return ok;
  if (h.kind != kPool) {
    // The leader stopped before it had a pool (its engine failed to start).
    if (h.kind == kStop) return {};
    return Error(ErrorCode::kInternal, "tensor parallel: expected the pool size first");
  }
  auto backend = make_backend(static_cast<int>(h.page_entries));
  if (!backend) return backend.error();
  std::vector<float> logits;
  const model::DeviceSamplingInput no_rows;
  model::DeviceSamplingOutput sampled;
  std::vector<std::int32_t> payload;
  for (;;) {
    if (auto ok = send_header(comm, h, point_to_point); !ok) return ok;
    if (h.kind == kStop) {
      if (point_to_point) return comm.wait_sends();  // the last steps' logits delivered
      return {};
    }
    payload.assign(
        static_cast<std::size_t>(2 * h.tokens + kSequenceInts * h.sequences + h.page_entries), 0);
    if (auto ok = deliver(comm, bytes(payload), point_to_point); !ok) return ok;
    auto batch = unpack(h, payload);
    if (!batch) return batch.error();
    if ((*backend)->samples_on_device()) {
      // The leader samples; here the step only has to run (sample() with no rows waits).
      if ((*backend)->launch(*batch)) (void)(*backend)->sample(no_rows, sampled);
    } else {
      (void)(*backend)->forward(*batch, logits);
    }
  }
}

}  // namespace weft::parallel
