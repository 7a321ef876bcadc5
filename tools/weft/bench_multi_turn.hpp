#pragma once
// `weft bench --multi-turn N`: chat conversations that share one system prompt and grow turn
// by turn (turn k + 1's prompt is turn k's prompt, its output and new user tokens), the
// workload a prefix cache is for. Conversations run concurrently; each sends its next turn
// when the previous one has finished. TTFT is reported per turn.

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <vector>

#include "weft/engine.hpp"

namespace weft::cli {

struct MultiTurnOptions {
  int conversations = 8;
  int turns = 4;
  int system_len = 256;  // tokens of the shared system prompt
  int user_len = 32;     // new user tokens per turn
  int output_len = 32;   // output tokens per turn
  std::uint64_t seed = 0;
  float temperature = 0.0f;
};

struct MultiTurnResult {
  std::vector<std::vector<double>> ttft_ms_by_turn;  // [turn][conversation]
  std::vector<long> prompt_tokens_by_turn;           // summed over conversations
  std::vector<long> cached_tokens_by_turn;           // of those, from the prefix cache
  std::vector<double> itl_ms;
  std::vector<double> tpot_ms;
  int requests = 0;
  int failed = 0;
  long input_tokens = 0;
  long output_tokens = 0;
  double seconds = 0;
};

MultiTurnResult run_multi_turn(Engine& engine, const boost::asio::any_io_executor& executor,
                               const MultiTurnOptions& options);

// Prints the summary (TTFT by turn, the prefix cache's hit rate) and returns the JSON fields.
boost::json::object report_multi_turn(const MultiTurnResult& result, const EngineMetrics& metrics,
                                      const MultiTurnOptions& options);

}  // namespace weft::cli
