// Generic JSON values: any string (every character and escape JSON allows), any number, any
// value, for schemas that leave a part unconstrained.

#include "runtime/grammar/json_schema_converter.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"

namespace weft::grammar::detail {

RuleId JsonSchemaConverter::any_string() {
  if (any_string_) return *any_string_;
  RuleId r = g_.add_rule("string");
  any_string_ = r;
  g_.set_body(r, g_.sequence({g_.byte('"'), g_.star(string_char()), g_.byte('"')}));
  return r;
}

ExprId JsonSchemaConverter::string_char() {
  if (!string_char_) {
    // Any character JSON allows unescaped, or any escape JSON defines (\uXXXX included), so
    // free-form strings accept everything a JSON parser does.
    ByteSet simple;
    for (char c : std::string_view("\"\\/bfnrt"))
      simple.set(static_cast<std::uint8_t>(c));
    ByteSet hex = ByteSet::range('0', '9');
    hex.set_range('a', 'f');
    hex.set_range('A', 'F');
    auto escape = g_.sequence(
        {g_.byte('\\'), g_.choice({g_.bytes(simple),
                                   g_.sequence({g_.byte('u'), g_.repeat(g_.bytes(hex), 4, 4)})})});
    string_char_ = g_.add_rule(
        "char", g_.choice({g_.codepoints(complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})),
                           escape}));
  }
  return g_.ref(*string_char_);
}

RuleId JsonSchemaConverter::any_number() {
  if (any_number_) return *any_number_;
  RuleId r = g_.add_rule("number");
  any_number_ = r;
  auto digit = g_.bytes(ByteSet::range('0', '9'));
  auto integer =
      g_.choice({g_.byte('0'), g_.sequence({g_.bytes(ByteSet::range('1', '9')), g_.star(digit)})});
  ByteSet e;
  e.set('e');
  e.set('E');
  ByteSet sign;
  sign.set('+');
  sign.set('-');
  g_.set_body(r, g_.sequence({g_.optional(g_.byte('-')), integer,
                              g_.optional(g_.sequence({g_.byte('.'), g_.plus(digit)})),
                              g_.optional(g_.sequence(
                                  {g_.bytes(e), g_.optional(g_.bytes(sign)), g_.plus(digit)}))}));
  return r;
}

RuleId JsonSchemaConverter::any_value() {
  if (any_value_) return *any_value_;
  RuleId value = g_.add_rule("value");
  any_value_ = value;
  RuleId object = g_.add_rule("object");
  RuleId array = g_.add_rule("array");
  auto member = g_.sequence({g_.ref(any_string()), colon(), g_.ref(value)});
  g_.set_body(
      object,
      g_.sequence({g_.byte('{'), ws(),
                   g_.optional(g_.sequence({member, g_.star(g_.sequence({comma(), member}))})),
                   ws(), g_.byte('}')}));
  g_.set_body(array,
              g_.sequence({g_.byte('['), ws(),
                           g_.optional(g_.sequence(
                               {g_.ref(value), g_.star(g_.sequence({comma(), g_.ref(value)}))})),
                           ws(), g_.byte(']')}));
  g_.set_body(value,
              g_.choice({g_.ref(object), g_.ref(array), g_.ref(any_string()), g_.ref(any_number()),
                         token("true"), token("false"), token("null")}));
  return value;
}

}  // namespace weft::grammar::detail
