// Fuzzes tokenizer.json (loaders/tokenizer_json*.cpp): a tokenizer that parses then encodes
// and decodes a fixed text, so the components the file built (normalizers, pre-tokenizers,
// the model, decoders) run too.
#include <cstddef>
#include <cstdint>

#include "loaders/tokenizer_json.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (256 << 10)) return -1;
  auto tokenizer = weft::loaders::parse_tokenizer_json(weft::fuzz::as_text(data, size), "fuzz");
  if (!tokenizer) return 0;
  static constexpr std::string_view kText =
      "Hello world! <s> l'été 123 \xF0\x9F\x98\x80 \t\n  tabs\r\n";
  for (bool special : {false, true}) {
    auto ids = (*tokenizer)->encode(kText, special);
    if (!ids) continue;
    auto text = (*tokenizer)->decode(*ids, !special);
    (void)text;
  }
  return 0;
}
