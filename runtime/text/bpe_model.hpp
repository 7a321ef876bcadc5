#pragma once
// Byte-pair encoding as `tokenizers` runs it: merges applied lowest rank first (leftmost on
// ties), with optional byte fallback (<0xXX> tokens), unknown-token fusing and ignore_merges.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/text/model.hpp"
#include "weft/error.hpp"

namespace weft::text {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel final : public Model {
 public:
  // Fails when a merge names a token that the vocabulary lacks (what it names, and the rank).
  static Result<BpeModel> create(Vocabulary vocabulary,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 BpeOptions options);

  void encode(std::string_view word, std::vector<std::uint32_t>& ids) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }

 private:
  struct MergeTable {  // open addressing: (left id, right id) -> (rank, merged id)
    std::vector<std::uint64_t> keys;
    std::vector<std::uint64_t> values;
    std::uint64_t mask = 0;
    void build(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries);
    bool find(std::uint32_t left, std::uint32_t right, std::uint32_t& rank,
              std::uint32_t& merged) const;
  };

  Vocabulary vocabulary_;
  MergeTable merges_;
  BpeOptions options_;
  std::optional<std::uint32_t> unk_id_;
  std::uint32_t byte_ids_[256] = {};
  bool has_all_byte_tokens_ = false;
};

}  // namespace weft::text
