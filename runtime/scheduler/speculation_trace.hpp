#pragma once
// A trace of speculative decoding (docs/speculative.md#tracing): one JSON line per verification
// and per chunk of decode rows, saying which sequence, which step, the tree, the path the
// target accepted and what was committed. It pinpoints where a speculative run leaves plain
// greedy output: with WEFT_SPEC_TRACE=FILE (speculation_env.hpp) every engine of the process
// appends its lines to FILE.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace weft::sched {

struct SpeculationTraceEvent {
  std::uint64_t step = 0;
  std::uint64_t sequence = 0;
  int prompt_len = 0;
  // The slice's first position; a verification's root (the sequence's last token) is
  // catch_up tokens after it (a catch-up of tokens accepted off the last tree's first chain
  // before the root, in the same slice).
  int first_position = 0;
  int catch_up = 0;
  // The slice's tokens: a verification's catch-up, root and nodes (parents: the nodes', -1 for
  // a child of the root); a chunk of decode rows' tokens (parents empty).
  bool verification = false;
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> parent;
  std::vector<int> accepted;           // nodes on the accepted path, from the root down
  std::vector<std::int32_t> appended;  // tokens appended: the accepted ones, then the bonus
  int computed = 0;                    // the sequence's computed tokens after the step
};

// One line of JSON, no newline: {"step":..,"sequence":..,"prompt_len":..,"first_position":..,
// "catch_up":..,"kind":"verify"|"decode_rows","tokens":[..],"parent":[..],"accepted":[..],
// "appended":[..],"computed":..}.
std::string to_json_line(const SpeculationTraceEvent& e);

// Appends each event's line to `path` (whole lines, so engines sharing a file never interleave
// them); null, with a line on stderr, when the file cannot be opened.
std::function<void(const SpeculationTraceEvent&)> speculation_trace_to_file(std::string path);

}  // namespace weft::sched
