// Strings: minLength/maxLength (in characters, an escape counting as one), pattern, and the
// formats date, time, date-time, email, uuid, ipv4, uri, each as an exact grammar of what the
// format's validator (ajv-formats, full mode) accepts, or a subset of it.

#include <set>

#include "runtime/grammar/json_schema_converter.hpp"
#include "runtime/grammar/regex_to_grammar.hpp"

namespace weft::grammar::detail {
namespace {

// Days per month are exact (29 February only in leap years) because validators check them.
constexpr std::string_view kDate =
    "(\\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])"
    "|\\d{4}-(0[469]|11)-(0[1-9]|[12]\\d|30)"
    "|\\d{4}-02-(0[1-9]|1\\d|2[0-8])"
    "|(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)";
constexpr std::string_view kTime =
    "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
constexpr std::string_view kEmail =
    "[a-zA-Z0-9_+-]+(\\.[a-zA-Z0-9_+-]+)*@([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)+[a-zA-Z]([a-"
    "zA-Z0-9-]*[a-zA-Z0-9])?";
constexpr std::string_view kUuid =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
constexpr std::string_view kIpv4 =
    "((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
// scheme ":" then unreserved, sub-delims, ':' '@' '/' '?' '#', and percent-escapes.
// scheme ":" then either "//" host, port and path, or a path that does not start with '/';
// then a query and a fragment (one '#'). pchar: unreserved, sub-delims, ':', '@', escapes.
#define WEFT_PCHAR "([a-zA-Z0-9\\-._~!$&'()*+,;=:@]|%[0-9a-fA-F]{2})"
constexpr std::string_view kUri =
    "[a-zA-Z][a-zA-Z0-9+.-]*:(//[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?(/" WEFT_PCHAR
    "*)*|" WEFT_PCHAR "+(/" WEFT_PCHAR "*)*)(\\?(" WEFT_PCHAR "|[/?])*)?(#(" WEFT_PCHAR "|[/?])*)?";
#undef WEFT_PCHAR

// A hostname (RFC 1123 labels, as ajv-formats checks them), at most four labels of at most
// 62 characters, so the whole stays within the 253 characters validators allow.
constexpr std::string_view kLabel = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,60}[a-zA-Z0-9])?";

// Formats JSON Schema 2020-12 or ajv-formats define that Weft does not generate: refused
// (a validator checks them). Any other format is unknown, an annotation, and ignored.
const std::set<std::string_view> kKnownFormats{"duration",
                                               "idn-email",
                                               "idn-hostname",
                                               "ipv6",
                                               "iri",
                                               "iri-reference",
                                               "relative-json-pointer",
                                               "regex",
                                               "url",
                                               "byte",
                                               "int32",
                                               "int64",
                                               "float",
                                               "double",
                                               "iso-time",
                                               "iso-date-time"};

// RFC 6570 templates: literals without '%' (no percent-escapes generated) and simple {name}
// expressions, a subset of what ajv-formats accepts.
constexpr std::string_view kUriTemplate =
    "([a-zA-Z0-9\\-._~:/?#@!$&()*+,;=\\[\\]]|\\{[a-zA-Z0-9_]+\\})*";
// RFC 6901: '/'-separated tokens, '~' only as ~0 or ~1.
constexpr std::string_view kJsonPointer = "(/([^~/]|~[01])*)*";
// A relative reference: a path of unreserved characters (no scheme, so no ':').
constexpr std::string_view kRelativeRef = "[a-zA-Z0-9\\-._~]+(/[a-zA-Z0-9\\-._~]+)*";

std::optional<std::string> format_regex(std::string_view format) {
  if (format == "uri-template") return std::string(kUriTemplate);
  if (format == "json-pointer") return std::string(kJsonPointer);
  if (format == "uri-reference")
    return "(" + std::string(kUri) + "|" + std::string(kRelativeRef) + ")";
  if (format == "hostname") {
    std::string label(kLabel);
    return label + "(\\." + label + "){0,3}";
  }
  if (format == "date") return std::string(kDate);
  if (format == "time") return std::string(kTime);
  if (format == "date-time") return std::string(kDate) + "T" + std::string(kTime);
  if (format == "email") return std::string(kEmail);
  if (format == "uuid") return std::string(kUuid);
  if (format == "ipv4") return std::string(kIpv4);
  if (format == "uri") return std::string(kUri);
  return std::nullopt;
}

// The lengths (in characters; every format is ASCII) of the format's strings: {min, max},
// max empty when unbounded.
std::pair<std::uint32_t, std::optional<std::uint32_t>> format_lengths(std::string_view format) {
  if (format == "date") return {10, 10};
  if (format == "time") return {9, 24};
  if (format == "date-time") return {20, 35};
  if (format == "uuid") return {36, 36};
  if (format == "ipv4") return {7, 15};
  if (format == "email") return {5, std::nullopt};
  if (format == "hostname") return {1, 251};
  if (format == "json-pointer" || format == "uri-template") return {0, std::nullopt};
  if (format == "uri-reference") return {1, std::nullopt};
  return {3, std::nullopt};  // uri
}

// `(?:^A|^B)$` (every alternative of a group spanning the pattern anchored at its start) is
// `^(?:A|B)$`, a form the regex compiler takes; other patterns are returned as they are.
std::string hoist_start_anchors(std::string_view p) {
  std::size_t open = 0;
  if (p.starts_with("(?:"))
    open = 3;
  else if (p.starts_with("(") && !p.starts_with("(?"))
    open = 1;
  else
    return std::string(p);
  // The top-level '|'s of the group and where it closes (escapes and classes skipped).
  std::vector<std::size_t> bars;
  std::size_t close = std::string_view::npos;
  int depth = 0;
  bool in_class = false;
  for (std::size_t i = open; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (depth-- == 0) {
        close = i;
        break;
      }
    } else if (c == '|' && depth == 0) {
      bars.push_back(i);
    }
  }
  if (close == std::string_view::npos) return std::string(p);
  const std::string_view after = p.substr(close + 1);
  if (!after.empty() && after != "$") return std::string(p);
  std::string out = "^(?:";
  std::size_t from = open;
  bars.push_back(close);
  for (std::size_t k = 0; k < bars.size(); ++k) {
    std::string_view alt = p.substr(from, bars[k] - from);
    if (!alt.starts_with("^")) return std::string(p);
    out += (k ? "|" : "") + std::string(alt.substr(1));
    from = bars[k] + 1;
  }
  return out + ")" + std::string(after);
}

struct RepeatedCharacter {
  std::string atom;  // one character: a class, an escape, '.', or a literal
  std::uint32_t lo = 0, hi = kUnbounded;
};

// `^ATOM*$`, `^ATOM+$`, `^ATOM{m}$`, `^ATOM{m,}$`, `^ATOM{m,n}$` (anchored at both ends), with
// ATOM a bracket class (escapes inside), `\d` `\D` `\w` `\W` `\s` `\S`, `\uXXXX`, another
// escaped character, `.`, or one literal byte; m and n of at most five digits. A scan, not a
// std::regex: libstdc++'s matcher recurses once per character and overflowed the stack on a
// 200 KB class.
std::optional<RepeatedCharacter> repeated_character(std::string_view pattern) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto hex = [&](char c) {
    return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  std::size_t i = 0;
  const std::size_t size = pattern.size();
  if (size < 3 || pattern[0] != '^' || pattern[size - 1] != '$') return std::nullopt;
  const std::string_view body = pattern.substr(1, size - 2);  // ATOM and its quantifier
  const auto at = [&](std::size_t k) { return k < body.size() ? body[k] : '\0'; };
  // The atom.
  if (at(0) == '[') {
    i = 1;
    std::size_t items = 0;
    for (;;) {
      if (i >= body.size()) return std::nullopt;
      const char c = body[i];
      if (c == ']') break;
      if (c == '\\') {
        if (i + 1 >= body.size() || body[i + 1] == '\n' || body[i + 1] == '\r') return std::nullopt;
        i += 2;
      } else {
        i += 1;
      }
      ++items;
    }
    if (items == 0) return std::nullopt;
    ++i;  // the ']'
  } else if (at(0) == '\\') {
    const char e = at(1);
    if (i + 1 >= body.size()) return std::nullopt;
    if (e == 'u') {
      for (std::size_t k = 2; k < 6; ++k)
        if (!hex(at(k)) || k >= body.size()) return std::nullopt;
      i = 6;
    } else if (std::string_view("dDwWsS").find(e) != std::string_view::npos ||
               std::string_view("0123456789bBx").find(e) == std::string_view::npos) {
      i = 2;
    } else {
      return std::nullopt;
    }
  } else if (!body.empty() &&
             std::string_view("\\()|*+?{}[]^$").find(body[0]) == std::string_view::npos) {
    i = 1;  // '.' or one literal byte
  } else {
    return std::nullopt;
  }
  RepeatedCharacter out;
  out.atom = std::string(body.substr(0, i));
  const std::string_view q = body.substr(i);
  if (q == "*") return out;
  if (q == "+") {
    out.lo = 1;
    return out;
  }
  // `{m}`, `{m,}`, `{m,n}`.
  if (q.size() < 3 || q.front() != '{' || q.back() != '}') return std::nullopt;
  const std::string_view inner = q.substr(1, q.size() - 2);
  const std::size_t comma = inner.find(',');
  const std::string_view lo = inner.substr(0, comma);
  const std::string_view hi =
      comma == std::string_view::npos ? std::string_view() : inner.substr(comma + 1);
  const auto all_digits = [&](std::string_view d) {
    for (char c : d)
      if (!digit(c)) return false;
    return true;
  };
  if (lo.empty() || lo.size() > 5 || !all_digits(lo) || hi.size() > 5 || !all_digits(hi))
    return std::nullopt;
  out.lo = static_cast<std::uint32_t>(std::stoul(std::string(lo)));
  out.hi = comma == std::string_view::npos ? out.lo
           : hi.empty()                    ? kUnbounded
                        : static_cast<std::uint32_t>(std::stoul(std::string(hi)));
  if (out.hi < out.lo) return std::nullopt;
  return out;
}

}  // namespace

Result<ExprId> JsonSchemaConverter::string_schema(Json s, const std::string& path) {
  auto obj = s.get_object().value();
  Json v;
  auto length = [&](const char* key) -> Result<std::optional<std::uint32_t>> {
    Json n;
    if (obj[key].get(n)) return std::optional<std::uint32_t>();
    auto count = json_count(n);
    if (!count)
      return error(path + "/" + key, std::string(key) + " must be a non-negative integer");
    if (*count > 100000) return error(path + "/" + key, std::string(key) + " is too large");
    return std::optional<std::uint32_t>(static_cast<std::uint32_t>(*count));
  };
  auto min_len = length("minLength");
  if (!min_len) return min_len.error();
  auto max_len = length("maxLength");
  if (!max_len) return max_len.error();
  std::string_view pattern, format;
  bool has_pattern = !obj["pattern"].get(pattern);
  bool has_format = !obj["format"].get(format);
  if (!obj["pattern"].get(v) && !v.is_string())
    return error(path + "/pattern", "pattern must be a string");
  if (!obj["format"].get(v) && !v.is_string())
    return error(path + "/format", "format must be a string");
  // An unknown format is an annotation (validators ignore it): accepted, with a warning.
  if (has_format && kKnownFormats.count(format))
    return Error(
        ErrorCode::kUnsupported,
        "JSON Schema at '" + path + "/format': unsupported format '" + std::string(format) + "'");
  if (has_format && !format_regex(format)) {
    warn(path + "/format", "unknown format '" + std::string(format) + "' is not enforced");
    has_format = false;
  }
  // A format whose every string already meets the length limits makes them redundant.
  if (has_format) {
    auto [flo, fhi] = format_lengths(format);
    if (min_len->value_or(0) <= flo && (!max_len->has_value() || (fhi && **max_len >= *fhi))) {
      *min_len = std::nullopt;
      *max_len = std::nullopt;
    }
  }
  bool has_length = min_len->has_value() || max_len->has_value();
  if (has_format && has_pattern)
    return error(path, "unsupported keyword 'pattern' beside 'format' '" + std::string(format) +
                           "' (the intersection of two patterns is not generated)");
  if (has_format && has_length)
    return error(path, std::string("unsupported keyword '") +
                           (min_len->has_value() ? "minLength" : "maxLength") +
                           "' beside 'format' '" + std::string(format) +
                           "' whose strings may be outside the limits");
  if (has_pattern && has_length) {
    // A pattern that is one repeated character (`^[a-z0-9_-]+$`, `^\\d{3,}$`) meets the
    // lengths exactly: the repetition's bounds intersected with them.
    auto rep = repeated_character(pattern);
    if (!rep)
      return error(path, std::string("unsupported keyword '") +
                             (min_len->has_value() ? "minLength" : "maxLength") +
                             "' beside 'pattern' (the intersection is generated only for one "
                             "repeated character, such as ^[a-z]+$)");
    const std::uint32_t lo = std::max(rep->lo, min_len->value_or(0));
    const std::uint32_t hi = std::min(rep->hi, max_len->value_or(kUnbounded));
    if (lo > hi)
      return error(path,
                   "no string meets both 'pattern' and the length limits, so nothing matches");
    RegexOptions one;
    one.json_string = true;
    auto atom = regex_to_expr(g_, rep->atom, one);
    if (!atom) return error(path + "/pattern", atom.error().what());
    return g_.sequence({g_.byte('"'), g_.repeat(*atom, lo, hi), g_.byte('"')});
  }

  RegexOptions ro;
  ro.json_string = true;
  if (has_pattern) {
    ro.search = true;
    auto e = regex_to_expr(g_, hoist_start_anchors(pattern), ro);
    if (!e) return error(path + "/pattern", e.error().what());
    return g_.sequence({g_.byte('"'), *e, g_.byte('"')});
  }
  if (has_format) {
    auto re = format_regex(format);
    auto e = regex_to_expr(g_, *re, ro);
    if (!e) return e.error();
    return g_.sequence({g_.byte('"'), *e, g_.byte('"')});
  }
  if (has_length) {
    std::uint32_t lo = min_len->value_or(0);
    std::uint32_t hi = max_len->value_or(kUnbounded);
    if (hi != kUnbounded && lo > hi)
      return error(path, "minLength " + std::to_string(lo) + " exceeds maxLength " +
                             std::to_string(hi) + ", so nothing matches");
    return g_.sequence({g_.byte('"'), g_.repeat(string_char(), lo, hi), g_.byte('"')});
  }
  return g_.ref(any_string());
}

}  // namespace weft::grammar::detail
