#pragma once
// What `weft bench` leaves after a run: the summary lines and the JSON object (the last stdout
// line), and the --write-dataset file that replays the same work.

#include <cstdint>
#include <string>
#include <vector>

#include "tools/weft/bench_options.hpp"
#include "tools/weft/bench_requests.hpp"
#include "weft/engine.hpp"

namespace weft::cli {

// One JSON line per request, in the format --dataset reads: its prompt and the tokens it made.
bool write_dataset_file(const std::string& path,
                        const std::vector<std::vector<std::int32_t>>& prompts,
                        const std::vector<RequestTimes>& times);

// Prints the summary of a run of `times.size()` requests that took `seconds` (with a response
// format, where the masks' time went) and its JSON object; returns the exit code (1 when a
// request failed). `schemas`: --json-schema-dir's, empty otherwise.
int report_bench(const BenchOptions& o, const std::vector<RequestTimes>& times,
                 const EngineMetrics& metrics, double seconds, const std::string& resolved_device,
                 const ResponseFormat& format, const std::vector<std::string>& schemas);

}  // namespace weft::cli
