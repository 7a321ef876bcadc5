// Fuzzes a JSON Schema (runtime/grammar/json_schema_*.cpp) as a request's response_format
// brings it to the engine: the front end builds the grammar, then the compiler flattens it
// (the step that expands repetitions and bounds the rule count).
#include <cstddef>
#include <cstdint>

#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (64 << 10)) return -1;
  weft::ResponseFormat format;
  format.type = weft::ResponseFormat::Type::kJsonSchema;
  format.source = std::string(weft::fuzz::as_text(data, size));
  format.flexible_whitespace = size % 2 == 1;
  auto grammar = weft::grammar::grammar_for(format);
  if (!grammar) return 0;
  auto flat = weft::grammar::flatten_grammar(*grammar);
  (void)flat;
  return 0;
}
