#include "tools/weft/bench_report.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "tools/weft/bench_stats.hpp"

namespace weft::cli {

bool write_dataset_file(const std::string& path,
                        const std::vector<std::vector<std::int32_t>>& prompts,
                        const std::vector<RequestTimes>& times) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    boost::json::array ids(prompts[i].begin(), prompts[i].end());
    boost::json::object line{{"prompt_ids", std::move(ids)},
                             {"output_len", std::max(1, times[i].output_tokens)}};
    out << boost::json::serialize(line) << '\n';
  }
  out.flush();
  return static_cast<bool>(out);
}

namespace {

// EngineMetrics::step_phases as the JSON's "step_phases" (docs/engine.md#step-phases).
boost::json::object step_phases_json(const EngineMetrics& metrics) {
  const StepPhaseTimes& p = metrics.step_phases;
  const double steps = static_cast<double>(std::max<std::uint64_t>(1, metrics.steps));
  // Totals in ms and means per step in us, phase by phase, in the step's order.
  const std::pair<const char*, std::uint64_t> phases[] = {{"plan", p.plan_us},
                                                          {"batch", p.batch_us},
                                                          {"launch", p.launch_us},
                                                          {"launch_prepare", p.launch_prepare_us},
                                                          {"mask_wait", p.mask_wait_us},
                                                          {"detokenize_wait", p.detokenize_wait_us},
                                                          {"sampler_prepare", p.sampler_prepare_us},
                                                          {"sample", p.sample_us},
                                                          {"sampler_finish", p.sampler_finish_us},
                                                          {"complete", p.complete_us},
                                                          {"accept_wait", p.accept_wait_us},
                                                          {"finish", p.finish_us},
                                                          {"step", p.step_us},
                                                          {"gap", p.gap_us}};
  boost::json::object total_ms, per_step_us;
  for (const auto& [name, us] : phases) {
    total_ms[name] = static_cast<double>(us) / 1000.0;
    per_step_us[name] = static_cast<double>(us) / steps;
  }
  return {{"steps", metrics.steps},
          {"total_ms", std::move(total_ms)},
          {"per_step_us", std::move(per_step_us)},
          {"overlapped_steps", p.overlapped_steps},
          {"dropped_tokens", p.dropped_tokens}};
}

void print_step_phases(const EngineMetrics& metrics) {
  const StepPhaseTimes& p = metrics.step_phases;
  const double steps = static_cast<double>(std::max<std::uint64_t>(1, metrics.steps));
  auto mean = [steps](std::uint64_t us) { return static_cast<double>(us) / steps; };
  std::printf(
      "step phases, mean us per step over %llu steps: plan %.1f, batch %.1f, launch %.1f "
      "(backend prepare %.1f), mask wait %.1f, detokenize wait %.1f, sampler prepare %.1f, "
      "sample %.1f, sampler finish %.1f, complete %.1f, accept wait %.1f, finish %.1f; "
      "step %.1f, gap to the next launch %.1f; %llu steps overlapped, %llu tokens dropped\n",
      static_cast<unsigned long long>(metrics.steps), mean(p.plan_us), mean(p.batch_us),
      mean(p.launch_us), mean(p.launch_prepare_us), mean(p.mask_wait_us),
      mean(p.detokenize_wait_us), mean(p.sampler_prepare_us), mean(p.sample_us),
      mean(p.sampler_finish_us), mean(p.complete_us), mean(p.accept_wait_us), mean(p.finish_us),
      mean(p.step_us), mean(p.gap_us), static_cast<unsigned long long>(p.overlapped_steps),
      static_cast<unsigned long long>(p.dropped_tokens));
}

}  // namespace

int report_bench(const BenchOptions& o, const std::vector<RequestTimes>& times,
                 const EngineMetrics& metrics, double seconds, const std::string& resolved_device,
                 const ResponseFormat& format, const std::vector<std::string>& schemas) {
  const int num_requests = static_cast<int>(times.size());
  // TPOT as vLLM and SGLang report it: per request, the time from its first token to its
  // last over the tokens after the first; requests of one token have none.
  std::vector<double> ttft, itl, tpot;
  long output_tokens = 0, input_tokens = 0;
  int failed = 0;
  for (const auto& t : times) {
    failed += t.failed;
    ttft.push_back(t.ttft_ms);
    if (t.output_tokens > 1) tpot.push_back(t.decode_ms / (t.output_tokens - 1));
    itl.insert(itl.end(), t.itl_ms.begin(), t.itl_ms.end());
    output_tokens += t.output_tokens;
    input_tokens += t.input_tokens;
  }
  std::uint64_t digest = 14695981039346656037ull;  // over the requests' digests, in order
  for (const auto& t : times)
    digest = (digest ^ t.digest) * 1099511628211ull;
  char digest_hex[17];
  std::snprintf(digest_hex, sizeof digest_hex, "%016llx", static_cast<unsigned long long>(digest));
  boost::json::object out{
      {"requests", num_requests},
      {"failed", failed},
      {"duration_s", seconds},
      {"requests_per_s", num_requests / seconds},
      {"input_tokens_per_s", static_cast<double>(input_tokens) / seconds},
      {"output_tokens_per_s", static_cast<double>(output_tokens) / seconds},
      {"ttft_ms_p50", percentile(ttft, 50)},
      {"ttft_ms_p99", percentile(ttft, 99)},
      {"tpot_ms_p50", percentile(tpot, 50)},
      {"tpot_ms_p99", percentile(tpot, 99)},
      {"itl_ms_p50", percentile(itl, 50)},
      {"itl_ms_p99", percentile(itl, 99)},
      {"peak_kv_pages", metrics.kv_pages_peak},
      {"kv_pages_total", metrics.kv_pages_total},
      {"kv_cache_dtype", metrics.kv_cache_dtype},
      {"kv_page_bytes", metrics.kv_page_bytes},
      {"kv_pool_tokens", metrics.kv_pool_tokens},
      {"preemptions", metrics.preemptions},
      {"schedule_policy", o.schedule_policy},
      {"max_tokens_per_step", o.max_tokens_per_step},
      {"max_running", o.max_running},
      {"tensor_parallel", o.tensor_parallel},
      {"pipeline_parallel", o.pipeline.stages},
      {"kv_compressions", metrics.kv_compressions},
      {"kv_compressed_pages", metrics.kv_compressed_pages},
      {"steps", metrics.steps},
      {"steps_in_flight_peak", metrics.steps_in_flight_peak},
      {"input_tokens", input_tokens},
      {"output_tokens", output_tokens},
      {"dataset", o.dataset},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"range_ratio", o.range_ratio},
      {"request_rate", o.request_rate},
      {"max_concurrency", o.max_concurrency},
      {"device", resolved_device},
      {"temperature", o.temperature},
      {"top_p", o.top_p},
      {"top_k", o.top_k},
      {"constrained", format.constrained()},
      {"schemas", schemas.empty() ? (format.type == ResponseFormat::Type::kJsonSchema ? 1 : 0)
                                  : static_cast<int>(schemas.size())},
      {"finished_stop", metrics.finished_stop},
      {"forward_ms", metrics.forward_us / 1000.0},
      {"constrained_steps", metrics.constrained_steps},
      {"masks_computed", metrics.masks_computed},
      {"mask_compute_ms", metrics.mask_compute_us / 1000.0},
      {"mask_wait_ms", metrics.mask_wait_us / 1000.0},
      {"constraint_accept_ms", metrics.constraint_accept_us / 1000.0},
      {"jump_forward_tokens", metrics.jump_forward_tokens},
      {"prefix_cache", o.prefix_cache},
      {"prefix_cache_hit_tokens", metrics.prefix_cache_hit_tokens},
      {"prefix_cache_query_tokens", metrics.prefix_cache_query_tokens},
      {"prefix_cache_evictions", metrics.prefix_cache_evictions},
      {"kv_pages_cached", metrics.kv_pages_cached},
      {"output_digest", digest_hex},
      {"speculate", o.speculative.speculate},
      {"spec_tokens", o.speculative.spec_tokens},
      {"spec_width", o.speculative.spec_width},
      {"repeat_prompt", o.repeat_prompt},
      {"speculative_verifications", metrics.speculative_verifications},
      {"speculative_draft_tokens", metrics.speculative_draft_tokens},
      {"speculative_accepted_tokens", metrics.speculative_accepted_tokens},
      {"mean_acceptance_length",
       metrics.speculative_verifications == 0
           ? 0.0
           : 1.0 + static_cast<double>(metrics.speculative_accepted_tokens) /
                       static_cast<double>(metrics.speculative_verifications)},
      {"model", o.model_dir}};
  out["overlap_steps"] = o.overlap_steps;
  out["step_phases"] = step_phases_json(metrics);
  std::printf("requests %d (%d failed) in %.2f s: %.2f req/s, %.1f output tok/s\n", num_requests,
              failed, seconds, num_requests / seconds,
              static_cast<double>(output_tokens) / seconds);
  std::printf(
      "TTFT p50 %.1f ms, p99 %.1f ms; TPOT p50 %.2f ms, p99 %.2f ms; ITL p50 %.2f ms, p99 %.2f "
      "ms; peak KV %d/%d pages (%s KV, %lld tokens)\n",
      percentile(ttft, 50), percentile(ttft, 99), percentile(tpot, 50), percentile(tpot, 99),
      percentile(itl, 50), percentile(itl, 99), metrics.kv_pages_peak, metrics.kv_pages_total,
      metrics.kv_cache_dtype.c_str(), static_cast<long long>(metrics.kv_pool_tokens));
  print_step_phases(metrics);
  if (format.constrained()) {
    // The overlap: masks for step N+1 are computed while its forward pass runs; only what is
    // left when the logits arrive delays sampling. On a GPU the wait is counted from the
    // launch, while the device still computes, so "hidden" is a lower bound there.
    const double compute_ms = metrics.mask_compute_us / 1000.0;
    const double wait_ms = metrics.mask_wait_us / 1000.0;
    std::printf(
        "constraint: %llu masks over %llu steps: %.1f ms computing them, at least %.1f ms of it "
        "hidden under %.1f ms of forward passes, %.1f ms waited for; %.1f ms "
        "accepting tokens; %llu tokens forced (jump-forward); %llu outputs complete (stop)\n",
        static_cast<unsigned long long>(metrics.masks_computed),
        static_cast<unsigned long long>(metrics.constrained_steps), compute_ms,
        std::max(0.0, compute_ms - wait_ms), metrics.constrained_forward_us / 1000.0, wait_ms,
        metrics.constraint_accept_us / 1000.0,
        static_cast<unsigned long long>(metrics.jump_forward_tokens),
        static_cast<unsigned long long>(metrics.finished_stop));
  }
  std::cout << boost::json::serialize(out) << std::endl;
  return failed == 0 ? 0 : 1;
}

}  // namespace weft::cli
