#pragma once
// Decoders of the `tokenizers` pipeline: each maps the list of token strings to a new list
// (decode_chain); the tokenizer joins the final list.

#include <memory>
#include <string>
#include <vector>

#include "runtime/text/pre_tokenizers.hpp"

namespace weft::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Maps GPT-2's byte alphabet back to bytes; the whole result is then read as lossy UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// Runs of <0xXX> tokens become their bytes when those are valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string pattern_, content_;
};

// Removes up to `start` leading and `stop` trailing `content` characters from every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string content_;
  std::size_t start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string prefix_;
  bool cleanup_;
};

// BPE's end-of-word suffix decoder ("</w>" becomes a space, except on the last token).
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_)
      step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// tokenizers' `cleanup`: glue punctuation and English contractions back to the word before.
std::string cleanup_tokenization_spaces(std::string text);

}  // namespace weft::text
