// Numbers and integers. Integer bounds are exact grammars over decimal digit strings (the
// classic range-to-regex construction); number bounds are exact when the bounds are integers
// (split into the integer part's range and what the fraction may be), and refused otherwise.

#include <cmath>
#include <string>

#include "runtime/grammar/json_schema_converter.hpp"

namespace weft::grammar::detail {
namespace {

// Bounds beyond this lose exactness as doubles; refused rather than rounded.
constexpr double kMaxBound = 1e15;

class DigitRanges {
 public:
  explicit DigitRanges(Grammar& g) : g_(g) {}

  ExprId digit(char lo, char hi) {
    return g_.bytes(ByteSet::range(static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi)));
  }
  // Digit strings of equal length n between x and y inclusive (x <= y).
  ExprId same_length(const std::string& x, const std::string& y) {
    if (x.empty()) return g_.empty();
    if (x[0] == y[0])
      return g_.sequence(
          {g_.byte(static_cast<std::uint8_t>(x[0])), same_length(x.substr(1), y.substr(1))});
    std::string rest_lo = x.substr(1), rest_hi = y.substr(1);
    bool lo_zero = rest_lo.find_first_not_of('0') == std::string::npos;
    bool hi_nine = rest_hi.find_first_not_of('9') == std::string::npos;
    std::vector<ExprId> alts;
    char first = x[0], last = y[0];
    if (!lo_zero) {
      alts.push_back(g_.sequence({g_.byte(static_cast<std::uint8_t>(x[0])),
                                  same_length(rest_lo, std::string(rest_lo.size(), '9'))}));
      ++first;
    }
    if (!hi_nine) --last;
    if (first <= last)
      alts.push_back(
          g_.sequence({digit(first, last),
                       g_.repeat(digit('0', '9'), static_cast<std::uint32_t>(rest_lo.size()),
                                 static_cast<std::uint32_t>(rest_lo.size()))}));
    if (!hi_nine)
      alts.push_back(g_.sequence({g_.byte(static_cast<std::uint8_t>(y[0])),
                                  same_length(std::string(rest_hi.size(), '0'), rest_hi)}));
    return g_.choice(std::move(alts));
  }
  // Non-negative integers in [lo, hi] without leading zeros; hi < 0 means unbounded.
  ExprId range(long long lo, long long hi) {
    std::string a = std::to_string(lo);
    std::vector<ExprId> alts;
    std::size_t max_len = hi < 0 ? a.size() : std::to_string(hi).size();
    for (std::size_t len = a.size(); len <= max_len; ++len) {
      std::string from = len == a.size() ? a : "1" + std::string(len - 1, '0');
      std::string to = (hi >= 0 && len == max_len) ? std::to_string(hi) : std::string(len, '9');
      if (len == 1 && from == "0" && to == "0") {
        alts.push_back(g_.byte('0'));
        continue;
      }
      alts.push_back(same_length(from, to));
    }
    if (hi < 0)  // any longer number
      alts.push_back(g_.sequence(
          {digit('1', '9'),
           g_.repeat(digit('0', '9'), static_cast<std::uint32_t>(a.size()), kUnbounded)}));
    return g_.choice(std::move(alts));
  }

 private:
  Grammar& g_;
};

struct Bound {
  bool present = false;
  double value = 0;
  bool exclusive = false;
};

}  // namespace

Result<ExprId> JsonSchemaConverter::number_schema(Json s, const std::string& path, bool integer) {
  auto obj = s.get_object().value();
  Bound lo, hi;
  auto read = [&](const char* key, Bound& b, bool exclusive) -> Result<void> {
    Json v;
    if (obj[key].get(v)) return {};
    if (!v.is_number()) return error(path + "/" + key, std::string(key) + " must be a number");
    double d = double(v);
    if (std::abs(d) > kMaxBound)
      return error(path + "/" + key, std::string(key) + " beyond 1e15 is not supported");
    if (b.present) {
      // Both minimum and exclusiveMinimum: keep the tighter.
      bool tighter = (&b == &lo) ? (d > b.value || (d == b.value && exclusive))
                                 : (d < b.value || (d == b.value && exclusive));
      if (!tighter) return {};
    }
    b = Bound{true, d, exclusive};
    return {};
  };
  for (auto [key, b, ex] :
       {std::tuple{"minimum", &lo, false}, std::tuple{"exclusiveMinimum", &lo, true},
        std::tuple{"maximum", &hi, false}, std::tuple{"exclusiveMaximum", &hi, true}}) {
    auto r = read(key, *b, ex);
    if (!r) return r.error();
  }
  if (!lo.present && !hi.present) {
    if (!integer) return g_.ref(any_number());
    auto digits =
        g_.choice({g_.byte('0'), g_.sequence({g_.bytes(ByteSet::range('1', '9')),
                                              g_.star(g_.bytes(ByteSet::range('0', '9')))})});
    return g_.sequence({g_.optional(g_.byte('-')), digits});
  }
  DigitRanges digits(g_);
  if (integer) {
    // Integers: make both bounds inclusive integers.
    long long a = 0, b = 0;
    if (lo.present)
      a = static_cast<long long>(lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value));
    if (hi.present)
      b = static_cast<long long>(hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value));
    if (lo.present && hi.present && a > b)
      return error(path, "no integer lies within the bounds, so nothing matches");
    std::vector<ExprId> alts;
    // Non-negative part [max(a,0), b].
    if (!hi.present || b >= 0)
      alts.push_back(digits.range(lo.present ? std::max(a, 0LL) : 0, hi.present ? b : -1));
    // Negative part: magnitudes [max(-b,1), -a].
    if (!lo.present || a < 0) {
      long long mlo = hi.present ? std::max(-b, 1LL) : 1;
      alts.push_back(g_.sequence({g_.byte('-'), digits.range(mlo, lo.present ? -a : -1)}));
    }
    return g_.choice(std::move(alts));
  }
  for (const Bound* b : {&lo, &hi})
    if (b->present && b->value != std::floor(b->value))
      return error(path,
                   "number bounds that are not integers are not supported (use an integer bound or "
                   "type integer)");
  if (lo.present && hi.present &&
      (lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive))))
    return error(path, "the minimum exceeds the maximum, so nothing matches");
  auto d09 = g_.bytes(ByteSet::range('0', '9'));
  ExprId frac_any = g_.optional(g_.sequence({g_.byte('.'), g_.plus(d09)}));
  ExprId frac_zero = g_.optional(g_.sequence({g_.byte('.'), g_.plus(g_.byte('0'))}));
  ExprId frac_nonzero =
      g_.sequence({g_.byte('.'), g_.star(d09), g_.bytes(ByteSet::range('1', '9')), g_.star(d09)});
  // A magnitude m = i.f within (L, U) with integer L, U (U < 0: none), each end inclusive or
  // not: i == L needs a non-zero fraction when L is exclusive; i == U needs a zero fraction
  // when U is inclusive and is excluded otherwise; integers between take any fraction.
  auto magnitude = [&](long long L, bool l_ex, long long U, bool u_ex) -> std::optional<ExprId> {
    std::vector<ExprId> alts;
    if (U >= 0 && L == U) {
      if (l_ex || u_ex) return std::nullopt;
      return g_.sequence({digits.range(L, L), frac_zero});
    }
    if (l_ex) alts.push_back(g_.sequence({digits.range(L, L), frac_nonzero}));
    long long from = l_ex ? L + 1 : L;
    long long to = U < 0 ? -1 : U - 1;
    if (U < 0 || from <= to) alts.push_back(g_.sequence({digits.range(from, to), frac_any}));
    if (U >= 0 && !u_ex) alts.push_back(g_.sequence({digits.range(U, U), frac_zero}));
    if (alts.empty()) return std::nullopt;
    return g_.choice(std::move(alts));
  };
  auto a = static_cast<long long>(lo.value), b = static_cast<long long>(hi.value);
  std::vector<ExprId> alts;
  // x >= 0: magnitude within [max(lo,0), hi].
  if (!hi.present || b > 0 || (b == 0 && !hi.exclusive)) {
    bool l_ex = lo.present && a >= 0 && lo.exclusive;
    if (auto m = magnitude(lo.present ? std::max(a, 0LL) : 0, l_ex, hi.present ? b : -1,
                           hi.present && hi.exclusive))
      alts.push_back(*m);
  }
  // x < 0: magnitude within (max(-hi,0), -lo), excluding 0 itself.
  if (!lo.present || a < 0) {
    long long L = hi.present && b < 0 ? -b : 0;
    bool l_ex = hi.present && b < 0 ? hi.exclusive : true;
    if (auto m = magnitude(L, l_ex, lo.present ? -a : -1, lo.present && lo.exclusive))
      alts.push_back(g_.sequence({g_.byte('-'), *m}));
  }
  if (alts.empty()) return error(path, "no number lies within the bounds, so nothing matches");
  return g_.choice(std::move(alts));
}

}  // namespace weft::grammar::detail
