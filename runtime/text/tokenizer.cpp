#include "runtime/text/tokenizer.hpp"

#include <algorithm>

#include "runtime/text/utf8.hpp"

namespace weft::text {

Tokenizer::Tokenizer(TokenizerParts parts)
    : parts_(std::move(parts)), added_(parts_.added_tokens, parts_.normalizer.get()) {
  id_bound_ = parts_.model->vocabulary().id_bound();
  for (const auto& t : parts_.added_tokens) {
    id_bound_ = std::max<std::size_t>(id_bound_, t.id + 1);
  }
  skipped_as_special_.assign(id_bound_, false);
  bool any_special = false;
  for (const auto& t : added_.tokens())
    any_special = any_special || t.special;
  // Each id that has a token: the model's (where no added token takes the id) and the added
  // ones; not every id below the bound, which a file can put in the millions.
  if (any_special) {
    parts_.model->vocabulary().for_each([&](std::uint32_t id, const std::string& token) {
      if (added_.find_id(id) == nullptr) skipped_as_special_[id] = added_.is_special_content(token);
    });
    for (const auto& t : added_.tokens())
      skipped_as_special_[t.id] = added_.is_special_content(*id_to_token(t.id));
  }
}

void Tokenizer::encode_segment(std::string_view text, bool at_start,
                               std::vector<std::uint32_t>& ids) const {
  std::vector<TextPiece> pieces;
  pieces.push_back({std::string(text), at_start});
  if (parts_.pre_tokenizer) parts_.pre_tokenizer->pre_tokenize(pieces);
  for (const auto& piece : pieces)
    parts_.model->encode(piece.text, ids);
}

Result<std::vector<std::uint32_t>> Tokenizer::encode(std::string_view text,
                                                     bool add_special_tokens) const {
  if (const std::size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    return Error(
        ErrorCode::kInvalidArgument, "text to encode is not valid UTF-8: ill-formed byte 0x" + [&] {
          static const char* hex = "0123456789abcdef";
          const auto b = static_cast<unsigned char>(text[bad]);
          return std::string{hex[b >> 4], hex[b & 15]};
        }() + " at offset " + std::to_string(bad));
  }
  try {
    return encode_valid(text, add_special_tokens);
  } catch (const Error& e) {
    // A regex from the file can exceed PCRE2's match limits on some input: report it, as
    // every other failure of encode is reported.
    return e;
  }
}

std::vector<std::uint32_t> Tokenizer::encode_valid(std::string_view text,
                                                   bool add_special_tokens) const {
  std::vector<std::uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  // 1. Added tokens that match the raw text. 2. Normalize what is left, then look for the
  // added tokens that match normalized text. 3. Pre-tokenize and encode the rest.
  std::vector<Segment> raw;
  added_.split(text, /*normalized_tokens=*/false, raw);
  std::vector<Segment> inner;
  for (const auto& segment : raw) {
    if (segment.id >= 0) {
      ids.push_back(static_cast<std::uint32_t>(segment.id));
      continue;
    }
    const bool at_start = segment.offset == 0;
    std::string normalized(segment.text);
    if (parts_.normalizer) parts_.normalizer->normalize(normalized);
    inner.clear();
    added_.split(normalized, /*normalized_tokens=*/true, inner);
    for (const auto& piece : inner) {
      if (piece.id >= 0) {
        ids.push_back(static_cast<std::uint32_t>(piece.id));
      } else {
        encode_segment(piece.text, at_start && piece.offset == 0, ids);
      }
    }
  }
  if (add_special_tokens && parts_.post_processor) parts_.post_processor->process(ids);
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const std::uint32_t> ids,
                                      bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string* token = id_to_token(ids[i]);
    if (token == nullptr) {
      return Error(ErrorCode::kOutOfRange,
                   "cannot decode id " + std::to_string(ids[i]) + " at position " +
                       std::to_string(i) +
                       ": the tokenizer has no token with that id (ids are below " +
                       std::to_string(id_bound_) + ")");
    }
    if (skip_special_tokens && skipped_as_special_[ids[i]]) continue;
    tokens.push_back(*token);
  }
  if (!parts_.decoder) {
    std::string joined;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) joined.push_back(' ');
      joined += tokens[i];
    }
    return joined;
  }
  parts_.decoder->decode_chain(tokens);
  std::string joined;
  for (const auto& t : tokens)
    joined += t;
  return joined;
}

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = added_.find_content(token)) return t->id;
  return parts_.model->vocabulary().find(token);
}

const std::string* Tokenizer::id_to_token(std::uint32_t id) const {
  if (const AddedToken* t = added_.find_id(id)) return &t->decode_form;
  return parts_.model->vocabulary().token(id);
}

bool Tokenizer::is_special(std::uint32_t id) const {
  const AddedToken* t = added_.find_id(id);
  return t != nullptr && t->special;
}

}  // namespace weft::text
