#pragma once
// What `weft bench`'s command line sets (cmd_bench.cpp registers the options and runs the
// benchmark; bench_report.cpp reports it).

#include <cstdint>
#include <string>

#include "tools/weft/kv_compress_option.hpp"
#include "tools/weft/pipeline_options.hpp"
#include "tools/weft/speculative_options.hpp"

namespace weft::cli {

struct BenchOptions {
  std::string model_dir;
  std::string quantize;  // --quantize: a block format name, empty for none
  int tensor_parallel = 1;
  PipelineOptions pipeline;
  std::string dataset;
  bool num_requests_given = false;
  int num_requests = 100;
  int input_len = 128;
  int output_len = 128;
  double range_ratio = 0.0;
  double request_rate = 0.0;  // requests per second; 0: all at once
  int max_concurrency = 0;    // requests in flight at most (closed loop); 0: no limit
  std::uint64_t seed = 0;
  std::string device = "auto";
  double gpu_memory_fraction = 0.0;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  int page_size = 16;
  std::int64_t kv_budget_mb = 256;
  std::string kv_cache_dtype = "auto";
  KvCompressOptions kv_compress;
  int max_tokens_per_step = 0;  // 0: EngineConfig's default (512 per GPU of a TP group)
  int max_running = 256;
  std::string admission = "reserve";
  std::string schedule_policy = "fcfs";
  unsigned threads = 0;
  std::string json_schema_file;
  std::string json_schema_dir;
  std::string write_dataset;
  bool no_jump_forward = false;
  std::string regex;
  std::string grammar_file;
  bool json_object = false;
  std::string prefix_cache = "on";
  std::string overlap_steps = "on";  // EngineConfig::overlap_steps
  int multi_turn = 0;                // turns per conversation; 0: independent requests
  int system_prompt_len = 256;
  SpeculativeOptions speculative;
  int repeat_prompt = 1;   // each prompt: a random block repeated this many times
  std::string step_trace;  // --step-trace: one JSON line per planned step
};

}  // namespace weft::cli
