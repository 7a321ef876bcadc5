#include "runtime/text/detokenizer.hpp"

namespace weft::text {
namespace {

bool ends_with_replacement(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                               bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

Result<std::string> IncrementalDetokenizer::push(std::span<const std::uint32_t> ids) {
  for (const std::uint32_t id : ids) {
    if (tokenizer_->id_to_token(id) == nullptr) {
      return Error(ErrorCode::kOutOfRange,
                   "cannot detokenize id " + std::to_string(id) +
                       ": the tokenizer has no token with that id (ids are below " +
                       std::to_string(tokenizer_->vocab_size()) + ")");
    }
  }
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  return step(false);
}

Result<std::string> IncrementalDetokenizer::finish() {
  return step(true);
}

Result<std::string> IncrementalDetokenizer::step(bool final) {
  const std::span<const std::uint32_t> all(ids_);
  auto before = tokenizer_->decode(all.subspan(prefix_, read_ - prefix_), skip_special_tokens_);
  if (!before) return before.error();
  auto after = tokenizer_->decode(all.subspan(prefix_), skip_special_tokens_);
  if (!after) return after.error();
  // Hold back while the newest character is incomplete, or while the window's text does not
  // yet extend what was emitted (a decoder that rewrites its first token can do that).
  if (after->size() <= before->size() || after->compare(0, before->size(), *before) != 0 ||
      (!final && ends_with_replacement(*after))) {
    return std::string();
  }
  std::string delta = after->substr(before->size());
  prefix_ = read_;
  read_ = ids_.size();
  return delta;
}

}  // namespace weft::text
