#include "runtime/scheduler/step_trace.hpp"

#include <cstdio>

namespace weft::sched {

StepTraceRecord describe_step(const Scheduler& scheduler, const StepPlan& plan, std::uint64_t step,
                              double t_ms) {
  StepTraceRecord r;
  r.step = step;
  r.t_ms = t_ms;
  r.running = scheduler.running();
  r.waiting = scheduler.waiting();
  r.preempted = static_cast<int>(plan.preempted.size());
  r.kv_pages_held = scheduler.pool().held_pages();
  for (const ScheduledSlice& s : plan.slices) {
    const Sequence* seq = scheduler.find(s.id);
    // The same split as bench/sched_sim.cpp's step cost: a decode row feeds one generated
    // token and reads the keys before it and its own.
    if (s.token_count == 1 && !s.draft && seq != nullptr && s.first_position >= seq->prompt_len) {
      ++r.decode_rows;
      r.decode_keys += s.first_position + 1;
    } else {
      r.prefill_rows += s.token_count;
      ++r.prefill_sequences;
    }
  }
  for (std::uint64_t id : plan.admitted) {
    if (const Sequence* seq = scheduler.find(id))
      r.admitted.push_back({seq->prompt_len, seq->max_new_tokens});
  }
  return r;
}

std::string to_json_line(const StepTraceRecord& r) {
  char head[320];
  std::snprintf(head, sizeof head,
                "{\"step\":%llu,\"t_ms\":%.3f,\"running\":%d,\"waiting\":%d,\"decode_rows\":%d,"
                "\"decode_keys\":%lld,\"prefill_rows\":%d,\"prefill_sequences\":%d,"
                "\"preempted\":%d,\"kv_pages_held\":%d,\"admitted\":[",
                static_cast<unsigned long long>(r.step), r.t_ms, r.running, r.waiting,
                r.decode_rows, static_cast<long long>(r.decode_keys), r.prefill_rows,
                r.prefill_sequences, r.preempted, r.kv_pages_held);
  std::string line = head;
  for (std::size_t i = 0; i < r.admitted.size(); ++i) {
    if (i > 0) line += ',';
    line += '[' + std::to_string(r.admitted[i].prompt_len) + ',' +
            std::to_string(r.admitted[i].max_new_tokens) + ']';
  }
  line += "]}";
  return line;
}

std::string step_trace_header(const SchedulerConfig& config, const std::string& source) {
  std::string escaped;
  for (char c : source) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "{\"trace\":\"weft-steps\",\"page_size\":%d,\"kv_pages\":%d,"
                "\"max_tokens_per_step\":%d,\"max_running\":%d,\"admission\":\"%s\","
                "\"schedule_policy\":\"%s\",\"prefix_cache\":%s,\"source\":\"",
                config.page_size, config.num_pages, config.max_tokens_per_step, config.max_running,
                config.admission == AdmissionPolicy::kReserve ? "reserve" : "optimistic",
                config.schedule == SchedulePolicy::kFirstCome ? "fcfs" : "lof",
                config.prefix_cache ? "true" : "false");
  return line + escaped + "\"}";
}

}  // namespace weft::sched
