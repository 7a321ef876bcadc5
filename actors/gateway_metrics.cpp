// The gateway's metrics (gateway_metrics.hpp): the Prometheus text, and the latency
// histograms the sessions fill as deltas go out (LatencyHistogram, TokenTimer).
#include "actors/gateway_metrics.hpp"

#include <chrono>
#include <cstdint>
#include <sstream>

namespace weft::gateway {
namespace {

void write_histogram(std::ostringstream& out, const char* name, const char* help,
                     const LatencyHistogram& h) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.kBounds.size(); ++i) {
    cumulative += h.counts[i];
    out << name << "_bucket{le=\"" << h.kBounds[i] << "\"} " << cumulative << '\n';
  }
  out << name << "_bucket{le=\"+Inf\"} " << h.count << '\n'
      << name << "_sum " << h.sum << '\n'
      << name << "_count " << h.count << '\n';
}

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const GatewayState& state) {
  std::ostringstream out;
  write_histogram(out, "weft_time_to_first_token_seconds",
                  "Seconds from a request being accepted to its first token, at the gateway.",
                  state.time_to_first_token);
  write_histogram(out, "weft_inter_token_latency_seconds",
                  "Seconds between a request's token deltas, at the gateway.",
                  state.inter_token_latency);
  auto gauge = [&](const char* name, const char* help, double value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " gauge\n"
        << name << ' ' << value << '\n';
  };
  auto counter = [&](const char* name, const char* help, double value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n"
        << name << ' ' << value << '\n';
  };
  gauge("weft_gateway_connections", "TCP connections held by the gateway.", state.connections);
  gauge("weft_gateway_live_requests", "Generations whose answer is being sent, HTTP and WebSocket.",
        state.live_generations);
  gauge("weft_gateway_queued_requests", "Generations submitted that have no token yet.",
        state.queued_generations);
  gauge("weft_gateway_draining", "1 while the server shuts down gracefully.", state.stopping);
  gauge("weft_gateway_connections_peak", "Most TCP connections held at once.",
        state.peak_connections);
  counter("weft_gateway_connections_refused_total", "Connections refused over the limit.",
          static_cast<double>(state.connections_refused));
  counter("weft_gateway_requests_refused_total",
          "Requests refused with 503 (over the limit, or while draining).",
          static_cast<double>(state.requests_refused));
  counter("weft_gateway_requests_throttled_total",
          "Requests refused with 429 over --max-queued-requests.",
          static_cast<double>(state.requests_throttled));
  counter("weft_gateway_send_timeouts_total",
          "SSE streams cancelled because the client stopped reading.",
          static_cast<double>(state.send_timeouts));
  counter("weft_gateway_backpressure_pauses_total",
          "Times a WebSocket client's outbound queue went over its limit.",
          static_cast<double>(state.backpressure_pauses));
  gauge("weft_requests_running", "Sequences in the running batch.", m.running);
  gauge("weft_requests_waiting", "Requests queued for admission.", m.waiting);
  gauge("weft_kv_pages_total", "KV cache pages in the pool.", m.kv_pages_total);
  gauge("weft_kv_pool_tokens", "Tokens the KV pool holds (pages * page size).",
        static_cast<double>(m.kv_pool_tokens));
  gauge("weft_kv_page_bytes", "Bytes of one KV page (its scales included for int8/fp8).",
        static_cast<double>(m.kv_page_bytes));
  gauge("weft_kv_pages_used", "KV cache pages live requests hold.", m.kv_pages_used);
  gauge("weft_kv_pages_cached", "KV cache pages the prefix cache holds (free on demand).",
        m.kv_pages_cached);
  counter("weft_prefix_cache_query_tokens_total",
          "Prompt tokens looked up in the prefix cache at admission.",
          static_cast<double>(m.prefix_cache_query_tokens));
  counter("weft_prefix_cache_hit_tokens_total",
          "Prompt tokens found in the prefix cache (KV reused, not computed).",
          static_cast<double>(m.prefix_cache_hit_tokens));
  counter("weft_prefix_cache_evictions_total", "KV pages evicted from the prefix cache.",
          static_cast<double>(m.prefix_cache_evictions));
  gauge("weft_kv_pages_peak", "Most KV cache pages in use at once.", m.kv_pages_peak);
  counter("weft_steps_total", "Engine steps run.", static_cast<double>(m.steps));
  counter("weft_preemptions_total", "Sequences preempted.", static_cast<double>(m.preemptions));
  counter("weft_kv_compressions_total", "Sequences whose KV was compressed (KV-Compress).",
          static_cast<double>(m.kv_compressions));
  counter("weft_kv_compressed_pages_total", "KV pages freed by KV-Compress.",
          static_cast<double>(m.kv_compressed_pages));
  counter("weft_speculative_verifications_total",
          "Draft trees verified (speculative decoding, docs/speculative.md).",
          static_cast<double>(m.speculative_verifications));
  counter("weft_speculative_draft_tokens_total", "Draft tokens proposed for verification.",
          static_cast<double>(m.speculative_draft_tokens));
  counter("weft_speculative_accepted_tokens_total", "Draft tokens accepted by verification.",
          static_cast<double>(m.speculative_accepted_tokens));
  counter("weft_prompt_tokens_total", "Prompt tokens processed.",
          static_cast<double>(m.prompt_tokens));
  counter("weft_generation_tokens_total", "Tokens generated.",
          static_cast<double>(m.generated_tokens));
  const double us = 1e-6;
  counter("weft_forward_seconds_total", "Time of every step from launch to logits.",
          static_cast<double>(m.forward_us) * us);
  counter("weft_constrained_steps_total", "Steps with at least one constrained sequence.",
          static_cast<double>(m.constrained_steps));
  counter("weft_constraint_masks_total", "Token bitmasks computed.",
          static_cast<double>(m.masks_computed));
  counter("weft_constraint_mask_seconds_total",
          "Time computing bitmasks (on the constraint actor, during the forward pass).",
          static_cast<double>(m.mask_compute_us) * us);
  counter("weft_constraint_mask_wait_seconds_total",
          "Time the step loop waited for bitmasks after the logits were ready.",
          static_cast<double>(m.mask_wait_us) * us);
  counter("weft_constraint_accept_seconds_total", "Time advancing matchers by sampled tokens.",
          static_cast<double>(m.constraint_accept_us) * us);
  counter("weft_jump_forward_tokens_total",
          "Output tokens the grammar forced, appended without sampling (jump-forward).",
          static_cast<double>(m.jump_forward_tokens));
  out << "# HELP weft_requests_finished_total Requests finished, by finish reason.\n"
      << "# TYPE weft_requests_finished_total counter\n";
  const std::pair<const char*, std::uint64_t> outcomes[] = {{"stop", m.finished_stop},
                                                            {"length", m.finished_length},
                                                            {"cancelled", m.finished_cancelled},
                                                            {"shutdown", m.finished_shutdown},
                                                            {"error", m.finished_error}};
  for (const auto& [reason, count] : outcomes) {
    out << "weft_requests_finished_total{finish_reason=\"" << reason << "\"} " << count << '\n';
  }
  return out.str();
}

void LatencyHistogram::record(double seconds) {
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i])
    ++i;
  if (i < kBounds.size()) ++counts[i];
  sum += seconds;
  ++count;
}

void TokenTimer::on_event(const Event& event) {
  if (event.kind != Event::Kind::kDelta || event.token_ids.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_).count();
  (first_seen_ ? state_.inter_token_latency : state_.time_to_first_token).record(seconds);
  first_seen_ = true;
  last_ = now;
}

}  // namespace weft::gateway
