#include "runtime/scheduler/speculation_trace.hpp"

#include <cstdio>
#include <mutex>

namespace weft::sched {
namespace {

template <typename T>
void append_array(std::string& out, const char* key, const std::vector<T>& values) {
  out += ",\"";
  out += key;
  out += "\":[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  out += ']';
}

}  // namespace

std::string to_json_line(const SpeculationTraceEvent& e) {
  std::string out = "{\"step\":" + std::to_string(e.step) +
                    ",\"sequence\":" + std::to_string(e.sequence) +
                    ",\"prompt_len\":" + std::to_string(e.prompt_len) +
                    ",\"first_position\":" + std::to_string(e.first_position) +
                    ",\"catch_up\":" + std::to_string(e.catch_up) + ",\"kind\":\"" +
                    (e.verification ? "verify" : "decode_rows") + "\"";
  append_array(out, "tokens", e.tokens);
  append_array(out, "parent", e.parent);
  append_array(out, "accepted", e.accepted);
  append_array(out, "appended", e.appended);
  out += ",\"computed\":" + std::to_string(e.computed) + "}";
  return out;
}

std::function<void(const SpeculationTraceEvent&)> speculation_trace_to_file(std::string path) {
  std::FILE* probe = std::fopen(path.c_str(), "a");
  if (probe == nullptr) {
    std::fprintf(stderr, "weft: WEFT_SPEC_TRACE: cannot open %s for appending\n", path.c_str());
    return nullptr;
  }
  std::fclose(probe);
  // Opened for each line (a debugging aid: a few lines a step), so that a file removed or
  // moved between runs starts again; one lock for the process, so lines never interleave.
  return [path = std::move(path)](const SpeculationTraceEvent& e) {
    static std::mutex mu;
    const std::string line = to_json_line(e) + "\n";
    std::lock_guard<std::mutex> lock(mu);
    if (std::FILE* f = std::fopen(path.c_str(), "a"); f != nullptr) {
      std::fwrite(line.data(), 1, line.size(), f);
      std::fclose(f);
    }
  };
}

}  // namespace weft::sched
