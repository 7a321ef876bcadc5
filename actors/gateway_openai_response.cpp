// The response side of the OpenAI API: completion objects, streaming chunks, logprobs and
// tool calls (actors/gateway_openai.hpp).
#include <boost/json.hpp>
#include <random>

#include "actors/gateway_openai.hpp"

namespace weft::gateway {
namespace json = boost::json;

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i)
    id += kAlphabet[pick(rng)];
  return id;
}

std::string_view finish_reason_name(FinishReason reason, int tool_calls) {
  if (tool_calls > 0 && reason == FinishReason::kStop) return "tool_calls";
  return finish_reason_name(reason);
}

json::value tool_calls_json(const ParsedToolCalls& parsed) {
  json::array calls;
  for (std::size_t i = 0; i < parsed.calls.size(); ++i) {
    const auto& c = parsed.calls[i];
    calls.push_back(
        json::object{{"id", c.id},
                     {"type", "function"},
                     {"function", json::object{{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return calls;
}

json::value usage_json(const Usage& usage) {
  // OpenAI's layout: prompt_tokens_details.cached_tokens counts the prompt tokens served from
  // the prefix cache.
  return json::object{
      {"prompt_tokens", usage.prompt_tokens},
      {"completion_tokens", usage.completion_tokens},
      {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
      {"prompt_tokens_details", json::object{{"cached_tokens", usage.cached_tokens}}}};
}

json::value completion_logprobs_json(const std::vector<TokenLogprobs>& logprobs,
                                     const ServedModel& model, std::size_t offset) {
  json::array tokens, token_logprobs, top_logprobs, text_offset;
  for (const TokenLogprobs& t : logprobs) {
    std::string text = model.token_text(t.id);
    text_offset.emplace_back(offset);
    offset += text.size();
    tokens.emplace_back(std::move(text));
    token_logprobs.emplace_back(t.logprob);
    json::object top;
    for (const auto& alt : t.top)
      top[model.token_text(alt.id)] = alt.logprob;
    top_logprobs.emplace_back(std::move(top));
  }
  return json::object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"top_logprobs", std::move(top_logprobs)},
                      {"text_offset", std::move(text_offset)}};
}

namespace {
json::array bytes_of(const std::string& text) {
  json::array bytes;
  for (unsigned char c : text)
    bytes.emplace_back(static_cast<int>(c));
  return bytes;
}
}  // namespace

json::value chat_logprobs_json(const std::vector<TokenLogprobs>& logprobs,
                               const ServedModel& model) {
  json::array content;
  for (const TokenLogprobs& t : logprobs) {
    const std::string text = model.token_text(t.id);
    json::array top;
    for (const auto& alt : t.top) {
      const std::string alt_text = model.token_text(alt.id);
      top.push_back(json::object{
          {"token", alt_text}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt_text)}});
    }
    content.push_back(json::object{{"token", text},
                                   {"logprob", t.logprob},
                                   {"bytes", bytes_of(text)},
                                   {"top_logprobs", std::move(top)}});
  }
  return json::object{{"content", std::move(content)}};
}

CompletionBuilder::CompletionBuilder(Api api, const ServedModel& model, std::string id,
                                     std::int64_t created, int samples, bool logprobs,
                                     std::optional<grammar::ToolCallFormat> tool_calls)
    : tool_calls_(tool_calls),
      api_(api),
      model_(model),
      id_(std::move(id)),
      created_(created),
      logprobs_(logprobs),
      choices_(static_cast<std::size_t>(samples)) {}

void CompletionBuilder::add(const Event& event) {
  if (event.index < 0 || event.index >= static_cast<int>(choices_.size())) return;
  Choice& choice = choices_[static_cast<std::size_t>(event.index)];
  if (event.kind == Event::Kind::kDelta) {
    choice.text += event.text;
    choice.logprobs.insert(choice.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
    return;
  }
  choice.finish_reason = event.finish_reason;
  // Samples share the prompt: it counts once; their outputs add up, as in OpenAI's usage.
  usage_.prompt_tokens = event.usage.prompt_tokens;
  usage_.cached_tokens = event.usage.cached_tokens;
  usage_.completion_tokens += event.usage.completion_tokens;
}

std::string CompletionBuilder::json() const {
  json::array choices;
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json::value logprobs = nullptr;
    json::object choice{{"index", i}};
    int calls = 0;
    if (api_ == Api::kChat && tool_calls_) {
      if (logprobs_) logprobs = chat_logprobs_json(c.logprobs, model_);
      ToolCallParser parser(*tool_calls_, new_tool_call_id);
      ParsedToolCalls parsed;
      collect(parser.feed(c.text), parsed);
      collect(parser.finish(), parsed);
      calls = static_cast<int>(parsed.calls.size());
      json::object message{{"role", "assistant"}};
      message["content"] =
          parsed.content.empty() && calls > 0 ? json::value(nullptr) : json::value(parsed.content);
      if (calls > 0) message["tool_calls"] = tool_calls_json(parsed);
      choice["message"] = std::move(message);
    } else if (api_ == Api::kChat) {
      if (logprobs_) logprobs = chat_logprobs_json(c.logprobs, model_);
      choice["message"] = json::object{{"role", "assistant"}, {"content", c.text}};
    } else {
      if (logprobs_) logprobs = completion_logprobs_json(c.logprobs, model_, 0);
      choice["text"] = c.text;
    }
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish_reason_name(c.finish_reason, calls);
    choices.push_back(std::move(choice));
  }
  json::object out{{"id", id_},
                   {"object", api_ == Api::kChat ? "chat.completion" : "text_completion"},
                   {"created", created_},
                   {"model", model_.name},
                   {"choices", std::move(choices)},
                   {"usage", usage_json(usage_)}};
  return json::serialize(out);
}

ChunkWriter::ChunkWriter(Api api, const ServedModel& model, std::string id, std::int64_t created,
                         bool include_usage, bool logprobs,
                         std::optional<grammar::ToolCallFormat> tool_calls)
    : api_(api),
      model_(model),
      id_(std::move(id)),
      created_(created),
      include_usage_(include_usage),
      logprobs_(logprobs),
      tool_calls_(api == Api::kChat ? tool_calls : std::nullopt) {}

// Content and tool call pieces as chat chunks: a call's first delta has its index, id, type
// and name (and empty arguments), the later ones fragments of its arguments.
std::string ChunkWriter::tool_deltas(std::size_t index, const std::vector<ToolCallPiece>& pieces) {
  std::string lines;
  for (const ToolCallPiece& p : pieces) {
    json::object delta;
    if (p.kind == ToolCallPiece::Kind::kContent) {
      delta["content"] = p.text;
    } else if (p.kind == ToolCallPiece::Kind::kCallStart) {
      delta["tool_calls"] = json::array{
          json::object{{"index", p.index},
                       {"id", p.id},
                       {"type", "function"},
                       {"function", json::object{{"name", p.name}, {"arguments", ""}}}}};
    } else {
      delta["tool_calls"] = json::array{
          json::object{{"index", p.index}, {"function", json::object{{"arguments", p.text}}}}};
    }
    lines += chunk(json::object{{"index", index},
                                {"delta", std::move(delta)},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}},
                   false);
  }
  return lines;
}

std::string ChunkWriter::chunk(const json::value& choice, bool with_usage) const {
  json::object out{{"id", id_},
                   {"object", api_ == Api::kChat ? "chat.completion.chunk" : "text_completion"},
                   {"created", created_},
                   {"model", model_.name},
                   {"choices", choice.is_null() ? json::array{} : json::array{choice}}};
  // OpenAI sends "usage": null on every chunk when usage was asked for, and the totals last.
  if (include_usage_) out["usage"] = with_usage ? usage_json(usage_) : json::value(nullptr);
  return "data: " + json::serialize(out) + "\n\n";
}

std::string ChunkWriter::on_event(const Event& event) {
  const auto index = static_cast<std::size_t>(std::max(event.index, 0));
  if (role_sent_.size() <= index) role_sent_.resize(index + 1, false);
  std::string lines;
  if (api_ == Api::kChat && !role_sent_[index]) {
    role_sent_[index] = true;
    lines += chunk(json::object{{"index", index},
                                {"delta", json::object{{"role", "assistant"}, {"content", ""}}},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}},
                   false);
  }
  if (tool_calls_) {
    if (parsers_.size() <= index) parsers_.resize(index + 1);
    if (!parsers_[index]) parsers_[index].emplace(*tool_calls_, new_tool_call_id);
    ToolCallParser& parser = *parsers_[index];
    if (event.kind == Event::Kind::kDelta)
      return lines + tool_deltas(index, parser.feed(event.text));
    lines += tool_deltas(index, parser.finish());
    usage_.prompt_tokens = event.usage.prompt_tokens;
    usage_.cached_tokens = event.usage.cached_tokens;
    usage_.completion_tokens += event.usage.completion_tokens;
    return lines + chunk(json::object{{"index", index},
                                      {"delta", json::object{}},
                                      {"logprobs", nullptr},
                                      {"finish_reason",
                                       finish_reason_name(event.finish_reason, parser.calls())}},
                         false);
  }
  if (event.kind == Event::Kind::kDelta) {
    if (event.text.empty() && event.logprobs.empty()) return lines;
    json::value logprobs = nullptr;
    if (logprobs_) {
      logprobs = api_ == Api::kChat ? chat_logprobs_json(event.logprobs, model_)
                                    : completion_logprobs_json(event.logprobs, model_, 0);
    }
    json::object choice{{"index", index}};
    if (api_ == Api::kChat) {
      choice["delta"] = json::object{{"content", event.text}};
    } else {
      choice["text"] = event.text;
    }
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = nullptr;
    return lines + chunk(choice, false);
  }
  usage_.prompt_tokens = event.usage.prompt_tokens;
  usage_.cached_tokens = event.usage.cached_tokens;
  usage_.completion_tokens += event.usage.completion_tokens;
  json::object choice{{"index", index}};
  if (api_ == Api::kChat) {
    choice["delta"] = json::object{};
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason_name(event.finish_reason);
  return lines + chunk(choice, false);
}

std::string ChunkWriter::finish() const {
  std::string lines;
  if (include_usage_) lines += chunk(json::value(nullptr), true);
  return lines + "data: [DONE]\n\n";
}

}  // namespace weft::gateway
