#pragma once
// Post-processors: what `add_special_tokens` adds around one encoded sequence (BOS/EOS, BERT's
// [CLS] ... [SEP]). ByteLevel's post-processor only trims offsets, so it changes no ids.

#include <cstdint>
#include <memory>
#include <vector>

namespace weft::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<std::uint32_t>& ids) const = 0;
};

// tokenizers' TemplateProcessing, single-sequence template: ids before and after $A.
class TemplatePostProcessor final : public PostProcessor {
 public:
  TemplatePostProcessor(std::vector<std::uint32_t> before, std::vector<std::uint32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<std::uint32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<std::uint32_t> before_, after_;
};

class NoOpPostProcessor final : public PostProcessor {
 public:
  void process(std::vector<std::uint32_t>&) const override {}
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void process(std::vector<std::uint32_t>& ids) const override {
    for (const auto& step : steps_)
      step->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

}  // namespace weft::text
