#include "runtime/grammar/tool_call_grammar.hpp"

#include <simdjson.h>

#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"

namespace weft::grammar {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>\n";
constexpr std::string_view kHermesClose = "\n</tool_call>";
constexpr std::string_view kHermesMarker = "<tool_call>";

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Any code point except those listed (ASCII).
ExprId any_except(Grammar& g, std::initializer_list<char> excluded) {
  std::vector<CodepointRange> set;
  for (char c : excluded)
    set.push_back({static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c)});
  return g.codepoints(complement_ranges(normalize_ranges(std::move(set))));
}

// Text that never contains `marker`, whose first byte occurs nowhere else in it. A text is a
// run of items, each a byte other than m0 or a proper prefix of the marker cut short by a
// byte that is neither the next marker byte nor m0, then possibly unfinished prefixes at the
// end. Prefixes followed by m0 restart the match, which Q* before each item covers.
ExprId text_without(Grammar& g, std::string_view marker) {
  const char m0 = marker[0];
  // tail(j): what may follow m0..m(j-1) inside an item.
  std::optional<ExprId> tail;
  for (std::size_t j = marker.size() - 1; j >= 1; --j) {
    ExprId cut = any_except(g, {marker[j], m0});
    if (tail) {
      tail = g.choice({cut, g.sequence({g.byte(static_cast<std::uint8_t>(marker[j])), *tail})});
    } else {
      tail = cut;
    }
  }
  // prefix: m0 (m1 (m2 ...)?)? — a proper prefix of the marker.
  std::optional<ExprId> rest;
  for (std::size_t j = marker.size() - 2; j >= 1; --j) {
    ExprId step = g.byte(static_cast<std::uint8_t>(marker[j]));
    rest = g.optional(rest ? g.sequence({step, *rest}) : step);
  }
  ExprId m0_byte = g.byte(static_cast<std::uint8_t>(m0));
  ExprId prefix = rest ? g.sequence({m0_byte, *rest}) : m0_byte;
  RuleId prefix_rule = g.add_rule("marker_prefix", prefix);
  ExprId prefixes = g.star(g.ref(prefix_rule));
  ExprId item = g.choice(
      {any_except(g, {m0}), g.sequence({prefixes, g.byte(static_cast<std::uint8_t>(m0)), *tail})});
  RuleId item_rule = g.add_rule("text_item", item);
  return g.sequence({g.star(g.ref(item_rule)), g.star(g.ref(prefix_rule))});
}

}  // namespace

std::string_view to_string(ToolCallFormat format) {
  return format == ToolCallFormat::kHermes ? "hermes" : "llama3_json";
}

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  return std::nullopt;
}

ToolCallFormat detect_tool_call_format(std::string_view source) {
  if (source.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      source.find("\"parameters\": dictionary") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

RuleId import_grammar(Grammar& target, const Grammar& source, const std::string& prefix) {
  std::vector<RuleId> rules(source.rule_count());
  for (std::size_t r = 0; r < source.rule_count(); ++r)
    rules[r] = target.add_rule(prefix + source.rule(static_cast<RuleId>(r)).name);
  // Children are always built before their parents, so one pass in id order maps them all.
  std::vector<ExprId> exprs(source.expr_count());
  for (std::size_t i = 0; i < source.expr_count(); ++i) {
    const Expr& e = source.expr(static_cast<ExprId>(i));
    std::vector<ExprId> children;
    for (ExprId c : e.children)
      children.push_back(exprs[c]);
    switch (e.kind) {
      case Expr::Kind::kBytes:
        exprs[i] = target.bytes(e.bytes);
        break;
      case Expr::Kind::kRule:
        exprs[i] = target.ref(rules[e.rule]);
        break;
      case Expr::Kind::kSequence:
        exprs[i] = children.empty() ? target.empty() : target.sequence(std::move(children));
        break;
      case Expr::Kind::kChoice:
        exprs[i] = target.choice(std::move(children));
        break;
      case Expr::Kind::kRepeat:
        exprs[i] = target.repeat(children.at(0), e.min, e.max);
        break;
    }
  }
  for (std::size_t r = 0; r < source.rule_count(); ++r) {
    const auto& body = source.rule(static_cast<RuleId>(r)).body;
    if (body) target.set_body(rules[r], exprs[*body]);
  }
  return rules[source.root()];
}

std::string tool_call_spec_json(const ToolCallSpec& spec) {
  std::string out = "{\"format\":" + quote(to_string(spec.format)) +
                    ",\"required\":" + (spec.required ? "true" : "false") +
                    ",\"parallel\":" + (spec.parallel ? "true" : "false") +
                    ",\"flexible_whitespace\":" + (spec.flexible_whitespace ? "true" : "false") +
                    ",\"functions\":[";
  for (std::size_t i = 0; i < spec.functions.size(); ++i) {
    const ToolFunction& f = spec.functions[i];
    if (i) out += ',';
    out += "{\"index\":" + std::to_string(f.index) + ",\"name\":" + quote(f.name) +
           ",\"strict\":" + (f.strict ? "true" : "false");
    if (!f.parameters.empty()) out += ",\"parameters\":" + f.parameters;
    out += '}';
  }
  return out + "]}";
}

Result<ToolCallSpec> parse_tool_call_spec(std::string_view json) {
  auto bad = [](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, "tool call spec: " + what);
  };
  simdjson::dom::parser parser;
  simdjson::padded_string text(json);
  simdjson::dom::element root;
  if (parser.parse(text).get(root)) return bad("not valid JSON");
  ToolCallSpec spec;
  std::string_view format;
  if (root["format"].get(format)) return bad("format is required");
  auto f = tool_call_format_from_name(format);
  if (!f) return bad("unknown format \"" + std::string(format) + "\"");
  spec.format = *f;
  bool b = false;
  if (!root["required"].get(b)) spec.required = b;
  if (!root["parallel"].get(b)) spec.parallel = b;
  if (!root["flexible_whitespace"].get(b)) spec.flexible_whitespace = b;
  simdjson::dom::array functions;
  if (root["functions"].get(functions)) return bad("functions is required");
  for (simdjson::dom::element fn : functions) {
    ToolFunction t;
    std::int64_t index = 0;
    std::string_view name;
    if (fn["index"].get(index) || fn["name"].get(name))
      return bad("a function lacks index or name");
    t.index = static_cast<int>(index);
    t.name = std::string(name);
    if (!fn["strict"].get(b)) t.strict = b;
    simdjson::dom::element parameters;
    if (!fn["parameters"].get(parameters)) t.parameters = simdjson::minify(parameters);
    spec.functions.push_back(std::move(t));
  }
  if (spec.functions.empty()) return bad("no functions");
  return spec;
}

namespace {

// The grammar and the flat form that checked it.
Result<std::pair<Grammar, FlatGrammar>> build_tool_call_grammar(const ToolCallSpec& spec) {
  if (spec.functions.empty()) {
    return Error(ErrorCode::kInvalidArgument, "tools: at least one function is required");
  }
  Grammar g;
  RuleId root = g.add_rule("root");
  const bool hermes = spec.format == ToolCallFormat::kHermes;
  const std::string args_key = hermes ? "arguments" : "parameters";
  std::vector<ExprId> bodies;
  for (const ToolFunction& f : spec.functions) {
    JsonGrammarOptions options;
    options.flexible_whitespace = spec.flexible_whitespace;
    options.strict = f.strict;
    Result<Grammar> args = f.parameters.empty() ? Result<Grammar>(json_object_grammar(options))
                                                : json_schema_to_grammar(f.parameters, options);
    if (!args) {
      return Error(args.error().code(), "tools[" + std::to_string(f.index) +
                                            "].function.parameters: " + args.error().what());
    }
    RuleId args_root = import_grammar(g, *args, "f" + std::to_string(f.index) + "_");
    bodies.push_back(
        g.sequence({g.literal("{\"name\": " + quote(f.name) + ", \"" + args_key + "\": "),
                    g.ref(args_root), g.byte('}')}));
  }
  ExprId call = g.choice(std::move(bodies));
  if (hermes) call = g.sequence({g.literal(kHermesOpen), call, g.literal(kHermesClose)});
  RuleId call_rule = g.add_rule("tool_call", call);
  ExprId calls = g.ref(call_rule);
  if (spec.parallel) {
    calls = g.sequence(
        {calls, g.star(g.sequence({g.literal(hermes ? "\n" : "; "), g.ref(call_rule)}))});
  }
  RuleId calls_rule = g.add_rule("tool_calls", calls);
  ExprId body = g.ref(calls_rule);
  if (!spec.required) {
    if (hermes) {
      body = g.sequence({text_without(g, kHermesMarker), g.optional(body)});
    } else {
      // Free text is anything that does not start with '{' (the empty output included).
      ExprId any = g.star(g.codepoints({{0, 0x10FFFF}}));
      body = g.choice({body, g.sequence({any_except(g, {'{'}), any}), g.empty()});
    }
  }
  g.set_body(root, body);
  g.set_root(root);
  auto flat = flatten_grammar(g);
  if (!flat) return Error(flat.error().code(), std::string("tools: ") + flat.error().what());
  return std::make_pair(std::move(g), std::move(flat.value()));
}

}  // namespace

Result<Grammar> tool_call_grammar(const ToolCallSpec& spec) {
  auto built = build_tool_call_grammar(spec);
  if (!built) return built.error();
  return std::move(built->first);
}

Result<FlatGrammar> tool_call_flat_grammar(const ToolCallSpec& spec) {
  auto built = build_tool_call_grammar(spec);
  if (!built) return built.error();
  return std::move(built->second);
}

}  // namespace weft::grammar
