#pragma once
// The checks and per-rule facts of a flattened grammar (grammar_compiler.hpp): every rule
// productive, no left recursion, then the nullable rules and the FIRST and FOLLOW sets.

#include "runtime/grammar/grammar_compiler.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

// Fills g.nullable, g.first, g.follow and g.follow_end, or says which rule can never finish
// or is left-recursive.
Result<void> analyse_flat_grammar(FlatGrammar& g);

}  // namespace weft::grammar
