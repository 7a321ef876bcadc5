#pragma once
// Normalizers of the `tokenizers` pipeline: each rewrites a piece of text before
// pre-tokenization. Weft tracks no offsets, so a normalizer is a plain string -> string map.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/regex.hpp"
#include "runtime/text/unicode.hpp"

namespace weft::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual void normalize(std::string& text) const = 0;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override;

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override;
};

// Removes marks; `tokenizers` expects it after an NFD/NFKD normalizer. The StripAccents
// normalizer removes every mark (M*), BERT's accent stripping only nonspacing ones (Mn).
class StripAccentsNormalizer final : public Normalizer {
 public:
  explicit StripAccentsNormalizer(bool nonspacing_only = false)
      : nonspacing_only_(nonspacing_only) {}
  void normalize(std::string& text) const override;

 private:
  bool nonspacing_only_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override;

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override;  // nothing on empty text

 private:
  std::string prefix_;
};

// Replace with a literal string pattern or a regular expression.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  ReplaceNormalizer(Regex regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  void normalize(std::string& text) const override;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

// BERT's: drop control characters and map whitespace to ' ', surround CJK ideographs with
// spaces, strip accents, lowercase.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, std::optional<bool> strip_accents,
                 bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents.value_or(lowercase)),
        lowercase_(lowercase) {}
  void normalize(std::string& text) const override;

 private:
  bool clean_text_, handle_chinese_chars_, strip_accents_, lowercase_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_)
      step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace weft::text
