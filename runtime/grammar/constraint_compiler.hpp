#pragma once
// From a request's ResponseFormat to a CompiledGrammar bound to the model's vocabulary. The
// vocabulary trie is built once, when the first constrained request arrives (an unconstrained
// server never pays for it), and compiled grammars are cached by their source, so the many
// requests of one API client sharing a schema compile it once; requests arriving while that
// schema is being compiled wait for that one compilation rather than starting their own.
// Compiling computes no mask (CompiledGrammar computes each on first use), so it takes
// milliseconds. Thread-safe (different schemas compile in parallel when called from several
// threads): the engine compiles on a thread of its own so a schema never stalls the step loop.

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/token_trie.hpp"
#include "weft/error.hpp"
#include "weft/response_format.hpp"

namespace weft::grammar {

// The grammar a format describes. Errors name where: the JSON pointer and keyword of a schema,
// the offset in a regex, the line and column of EBNF text.
Result<Grammar> grammar_for(const ResponseFormat& format);
// That grammar flattened, as ConstraintCompiler compiles it. A JSON Schema's is the flat form
// its converter made while checking it, so the schema is flattened once.
Result<FlatGrammar> flat_grammar_for(const ResponseFormat& format);

class ConstraintCompiler {
 public:
  // `load_vocab` reads the vocabulary when it is first needed; `eos_ids` are the tokens that
  // end a sequence (generation_config.json's), allowed only where the grammar has matched.
  ConstraintCompiler(std::function<Result<TokenizerVocab>()> load_vocab,
                     std::vector<std::int32_t> eos_ids, std::size_t cache_capacity = 64);

  // Errors are kInvalidArgument (or the front end's kParse/kUnsupported), not yet prefixed
  // with the request field's name.
  Result<std::shared_ptr<const CompiledGrammar>> compile(const ResponseFormat& format);
  Result<std::shared_ptr<const TokenTrie>> trie();

  // Microseconds the last compile() took (0 for a cache hit): what a client waits for before
  // generation starts.
  std::uint64_t last_compile_us() const;
  // How many compilations ran (cache misses that were not already being compiled).
  std::uint64_t compile_count() const;

 private:
  mutable std::mutex mutex_;
  std::function<Result<TokenizerVocab>()> load_vocab_;
  std::vector<std::int32_t> eos_ids_;
  std::shared_ptr<const TokenTrie> trie_;
  std::size_t capacity_;
  // Least recently used first; the map points into the list.
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> cache_;
  std::uint64_t last_compile_us_ = 0;
  std::uint64_t compile_count_ = 0;
  // Keys being compiled now: later requests for them wait on the first one's result.
  std::unordered_map<std::string,
                     std::shared_future<Result<std::shared_ptr<const CompiledGrammar>>>>
      in_flight_;
};

}  // namespace weft::grammar
