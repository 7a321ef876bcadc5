#include "runtime/grammar/constraint_compiler.hpp"

#include <chrono>

#include "runtime/grammar/ebnf_parser.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"
#include "runtime/grammar/tool_call_grammar.hpp"

namespace weft::grammar {
namespace {

JsonGrammarOptions json_options(const ResponseFormat& format) {
  JsonGrammarOptions json;
  json.flexible_whitespace = format.flexible_whitespace;
  json.strict = format.strict;
  return json;
}

}  // namespace

Result<Grammar> grammar_for(const ResponseFormat& format) {
  const JsonGrammarOptions json = json_options(format);
  switch (format.type) {
    case ResponseFormat::Type::kJsonObject:
      return json_object_grammar(json);
    case ResponseFormat::Type::kJsonSchema:
      return json_schema_to_grammar(format.source, json);
    case ResponseFormat::Type::kRegex:
      return regex_to_grammar(format.source);
    case ResponseFormat::Type::kGrammar:
      return parse_ebnf(format.source);
    case ResponseFormat::Type::kToolCalls: {
      auto spec = parse_tool_call_spec(format.source);
      if (!spec) return spec.error();
      return tool_call_grammar(*spec);
    }
    case ResponseFormat::Type::kText:
      break;
  }
  return Error(ErrorCode::kInvalidArgument, "an unconstrained format has no grammar");
}

Result<FlatGrammar> flat_grammar_for(const ResponseFormat& format) {
  // The converters that flatten to check keep that form (one flattening, not two).
  if (format.type == ResponseFormat::Type::kJsonSchema)
    return json_schema_to_flat_grammar(format.source, json_options(format));
  if (format.type == ResponseFormat::Type::kGrammar) return parse_ebnf_flat(format.source);
  if (format.type == ResponseFormat::Type::kToolCalls) {
    auto spec = parse_tool_call_spec(format.source);
    if (!spec) return spec.error();
    return tool_call_flat_grammar(*spec);
  }
  auto grammar = grammar_for(format);
  if (!grammar) return grammar.error();
  return flatten_grammar(*grammar);
}

ConstraintCompiler::ConstraintCompiler(std::function<Result<TokenizerVocab>()> load_vocab,
                                       std::vector<std::int32_t> eos_ids,
                                       std::size_t cache_capacity)
    : load_vocab_(std::move(load_vocab)),
      eos_ids_(std::move(eos_ids)),
      capacity_(std::max<std::size_t>(1, cache_capacity)) {}

Result<std::shared_ptr<const TokenTrie>> ConstraintCompiler::trie() {
  std::lock_guard lock(mutex_);
  if (trie_) return trie_;
  auto vocab = load_vocab_();
  if (!vocab) return vocab.error();
  vocab->eos_ids = eos_ids_;
  auto trie = TokenTrie::build(std::move(vocab.value()));
  if (!trie) return trie.error();
  trie_ = std::move(trie.value());
  return trie_;
}

Result<std::shared_ptr<const CompiledGrammar>> ConstraintCompiler::compile(
    const ResponseFormat& format) {
  const auto start = std::chrono::steady_clock::now();
  std::string key = std::to_string(static_cast<int>(format.type)) +
                    (format.flexible_whitespace ? "w" : "c") + (format.strict ? "s" : "l") + ":" +
                    format.source;
  std::promise<Result<std::shared_ptr<const CompiledGrammar>>> promise;
  {
    std::unique_lock lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      last_compile_us_ = 0;
      return it->second->second;
    }
    if (auto it = in_flight_.find(key); it != in_flight_.end()) {
      auto pending = it->second;
      lock.unlock();
      return pending.get();
    }
    in_flight_.emplace(key, promise.get_future().share());
    ++compile_count_;
  }
  auto result = [&]() -> Result<std::shared_ptr<const CompiledGrammar>> {
    auto t = trie();
    if (!t) return t.error();
    auto flat = flat_grammar_for(format);
    if (!flat) return flat.error();
    return CompiledGrammar::compile(std::move(*flat), t.value());
  }();
  {
    std::lock_guard lock(mutex_);
    in_flight_.erase(key);
    if (result) {
      last_compile_us_ =
          static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                         std::chrono::steady_clock::now() - start)
                                         .count());
      lru_.emplace_back(key, result.value());
      cache_.emplace(std::move(key), std::prev(lru_.end()));
      if (lru_.size() > capacity_) {
        cache_.erase(lru_.front().first);
        lru_.pop_front();
      }
    }
  }
  promise.set_value(result);
  return result;
}

std::uint64_t ConstraintCompiler::compile_count() const {
  std::lock_guard lock(mutex_);
  return compile_count_;
}

std::uint64_t ConstraintCompiler::last_compile_us() const {
  std::lock_guard lock(mutex_);
  return last_compile_us_;
}

}  // namespace weft::grammar
