#include "runtime/model/seq2seq_session.hpp"

#include <string>

namespace weft::model {
namespace {

KvLayout layout_of(const Seq2SeqModel& model, int page_size, KvDtype dtype) {
  KvLayout layout = model.kv_layout(page_size);
  layout.dtype = dtype;
  return layout;
}

}  // namespace

Seq2SeqSession::Seq2SeqSession(const Seq2SeqModel& model, int page_size, int num_pages,
                               unsigned threads, KvDtype kv_dtype)
    : model_(model), kv_(layout_of(model, page_size, kv_dtype), num_pages), pool_(threads) {}

Result<std::vector<int>> Seq2SeqSession::start(
    const std::vector<std::vector<std::int32_t>>& sources, int max_decoder_tokens) {
  if (max_decoder_tokens <= 0) {
    return Error(ErrorCode::kInvalidArgument, "a request needs at least one decoder position");
  }
  int needed = 0;
  for (const auto& source : sources) {
    if (source.empty()) return Error(ErrorCode::kInvalidArgument, "an encoder input is empty");
    needed += kv_.pages_for(static_cast<int>(source.size())) + kv_.pages_for(max_decoder_tokens);
  }
  if (needed > kv_.free_pages()) {
    return Error(ErrorCode::kResourceExhausted,
                 std::to_string(sources.size()) + " request(s) need " + std::to_string(needed) +
                     " KV pages (encoder output and " + std::to_string(max_decoder_tokens) +
                     " decoder positions each) but " + std::to_string(kv_.free_pages()) +
                     " are free");
  }
  EncodeBatch batch;
  std::vector<CrossAttentionSlice> cross;
  std::vector<Request> made;
  for (const auto& source : sources) {
    Request r;
    r.max_tokens = max_decoder_tokens;
    r.cross.length = static_cast<int>(source.size());
    for (int p = 0; p < kv_.pages_for(r.cross.length); ++p)
      r.cross.page_table.push_back(*kv_.allocate_page());
    for (int p = 0; p < kv_.pages_for(max_decoder_tokens); ++p)
      r.self_pages.push_back(*kv_.allocate_page());
    batch.tokens.insert(batch.tokens.end(), source.begin(), source.end());
    batch.lengths.push_back(r.cross.length);
    cross.push_back(r.cross);
    made.push_back(std::move(r));
  }
  auto release = [&] {
    for (const auto& r : made) {
      for (auto p : r.cross.page_table)
        kv_.release_page(p);
      for (auto p : r.self_pages)
        kv_.release_page(p);
    }
  };
  if (auto ok = model_.encode(batch, cross, kv_, pool_); !ok) {
    release();
    return ok.error();
  }
  std::vector<int> ids;
  for (auto& r : made) {
    ids.push_back(next_id_);
    requests_.emplace(next_id_++, std::move(r));
  }
  return ids;
}

Result<void> Seq2SeqSession::step(const std::vector<int>& ids,
                                  const std::vector<std::int32_t>& tokens,
                                  std::vector<float>& logits) {
  if (ids.size() != tokens.size()) {
    return Error(ErrorCode::kInvalidArgument, "a decoder step got " + std::to_string(ids.size()) +
                                                  " requests but " + std::to_string(tokens.size()) +
                                                  " tokens");
  }
  StepBatch batch;
  std::vector<CrossAttentionSlice> cross;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = requests_.find(ids[i]);
    if (it == requests_.end()) {
      return Error(ErrorCode::kNotFound, "no live request with id " + std::to_string(ids[i]));
    }
    Request& r = it->second;
    if (r.position >= r.max_tokens) {
      return Error(ErrorCode::kInvalidArgument,
                   "request " + std::to_string(ids[i]) + " has used its " +
                       std::to_string(r.max_tokens) + " decoder positions");
    }
    SequenceSlice seq;
    seq.token_begin = static_cast<int>(i);
    seq.token_count = 1;
    seq.page_table = r.self_pages;
    batch.tokens.push_back(tokens[i]);
    batch.positions.push_back(r.position);
    batch.sequences.push_back(std::move(seq));
    cross.push_back(r.cross);
  }
  if (auto ok = model_.decode(batch, cross, kv_, logits, pool_); !ok) return ok;
  for (const int id : ids)
    ++requests_.at(id).position;
  return {};
}

void Seq2SeqSession::finish(int id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (auto p : it->second.cross.page_table)
    kv_.release_page(p);
  for (auto p : it->second.self_pages)
    kv_.release_page(p);
  requests_.erase(it);
}

int Seq2SeqSession::decoded(int id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? -1 : it->second.position;
}

}  // namespace weft::model
