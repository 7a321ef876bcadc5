#include "bench/sched_sim.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <unordered_map>

#include "runtime/scheduler/step_trace.hpp"

namespace weft::bench {

StepCostModel StepCostModel::h100_8b() {
  StepCostModel m;
  m.decode_ms = {{1, 6.30}, {64, 8.55}, {256, 15.68}, {512, 27.44}};
  return m;
}

namespace {

Error bad(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

// Linear through the vertices, extended with the end slopes.
double interpolate(const std::vector<std::pair<double, double>>& v, double x) {
  if (v.size() == 1) return v[0].second;
  std::size_t k = 1;
  while (k + 1 < v.size() && x > v[k].first)
    ++k;
  const auto [x1, y1] = v[k - 1];
  const auto [x2, y2] = v[k];
  return y1 + (y2 - y1) * (x - x1) / (x2 - x1);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

double FittedCost::rows_ms_at(double rows) const {
  return interpolate(rows_ms, rows);
}

double FittedCost::step_ms(double decode_rows, double keys, double prefill_rows) const {
  return rows_ms_at(decode_rows + prefill_weight * prefill_rows) + ms_per_key * keys + overhead_ms;
}

Result<FittedCost> fit(const StepCostModel& m) {
  if (m.decode_ms.empty()) return bad("step model: no decode points (BATCH:MS)");
  if (m.decode_context < 1) return bad("step model: decode context must be >= 1");
  std::vector<std::pair<double, double>> at_ctx;
  for (const auto& [b, ms] : m.decode_ms) {
    if (b < 1 || !(ms > 0)) {
      return bad("step model: decode point " + std::to_string(b) + ":" + std::to_string(ms) +
                 " needs a batch >= 1 and ms > 0");
    }
    at_ctx.emplace_back(b, ms);
  }
  std::sort(at_ctx.begin(), at_ctx.end());
  for (std::size_t i = 1; i < at_ctx.size(); ++i) {
    if (at_ctx[i].first == at_ctx[i - 1].first) {
      return bad("step model: batch " + std::to_string(static_cast<int>(at_ctx[i].first)) +
                 " appears twice in the decode points");
    }
  }
  if (m.kv_context <= m.decode_context || m.kv_batch < 1 || !(m.kv_ms > 0)) {
    return bad(
        "step model: the kv point (BATCH:CONTEXT:MS) needs a context above the decode "
        "context (" +
        std::to_string(m.decode_context) + "), a batch >= 1 and ms > 0");
  }
  if (m.prefill_tokens < 1 || !(m.prefill_ms > 0) || m.overhead_ms < 0) {
    return bad("step model: the prefill point (TOKENS:MS) needs tokens >= 1 and ms > 0");
  }
  FittedCost f;
  f.overhead_ms = m.overhead_ms;
  // The kv point's rows read kv_context - decode_context more keys each than at decode_context.
  f.ms_per_key = std::max(0.0, (m.kv_ms - interpolate(at_ctx, m.kv_batch)) /
                                   (static_cast<double>(m.kv_batch) *
                                    static_cast<double>(m.kv_context - m.decode_context)));
  for (const auto& [b, ms] : at_ctx)
    f.rows_ms.emplace_back(b, ms - f.ms_per_key * m.decode_context * b);
  for (std::size_t i = 1; i < f.rows_ms.size(); ++i) {
    if (f.rows_ms[i].second < f.rows_ms[i - 1].second) {
      return bad("step model: a decode step of batch " +
                 std::to_string(static_cast<int>(f.rows_ms[i].first)) +
                 " costs less than a smaller one once its KV reads are taken out");
    }
  }
  // w: the rows of decode work a prefill step of prefill_tokens costs, per token.
  const auto& v = f.rows_ms;
  double rows = v.front().first;
  if (m.prefill_ms > v.front().second && v.size() > 1) {
    std::size_t k = 1;
    while (k + 1 < v.size() && m.prefill_ms > v[k].second)
      ++k;
    const auto [x1, y1] = v[k - 1];
    const auto [x2, y2] = v[k];
    rows = y2 > y1 ? x1 + (m.prefill_ms - y1) * (x2 - x1) / (y2 - y1) : x2;
  }
  f.prefill_weight = rows / m.prefill_tokens;
  return f;
}

Result<std::vector<SimRequest>> read_workload(const std::string& path, int num_requests) {
  std::ifstream in(path);
  if (!in) return Error(ErrorCode::kNotFound, path + ": cannot be read");
  std::vector<SimRequest> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    boost::system::error_code ec;
    const boost::json::value doc = boost::json::parse(line, ec);
    if (ec || !doc.is_object()) return Error(ErrorCode::kParse, where + "not a JSON object");
    const auto& o = doc.as_object();
    SimRequest r;
    auto as_len = [&](const char* key, int& to) -> Result<void> {
      const auto* v = o.if_contains(key);
      if (v == nullptr || !v->is_int64() || v->as_int64() < 1 || v->as_int64() > (1 << 20)) {
        return Error(ErrorCode::kParse,
                     where + key + " must be an integer in [1, 1048576]" +
                         (v ? ", not " + boost::json::serialize(*v) : " (missing)"));
      }
      to = static_cast<int>(v->as_int64());
      return {};
    };
    if (const auto* ids = o.if_contains("prompt_ids")) {
      if (!ids->is_array() || ids->as_array().empty())
        return Error(ErrorCode::kParse, where + "prompt_ids must be a non-empty array");
      r.input_len = static_cast<int>(ids->as_array().size());
    } else if (auto ok = as_len("input_len", r.input_len); !ok) {
      return ok.error();
    }
    if (auto ok = as_len("output_len", r.output_len); !ok) return ok.error();
    out.push_back(r);
    if (num_requests > 0 && static_cast<int>(out.size()) == num_requests) break;
  }
  if (out.empty()) return Error(ErrorCode::kParse, path + ": no requests");
  return out;
}

Result<SimResult> simulate(const std::vector<SimRequest>& requests, const FittedCost& cost,
                           const SimOptions& options) {
  std::vector<SimRequest> reqs = requests;
  std::mt19937_64 rng(options.seed);
  if (options.request_rate > 0) {
    std::exponential_distribution<double> gap(options.request_rate);
    double t = 0;
    for (auto& r : reqs) {
      t += gap(rng);
      r.arrival_s = t;
    }
  } else {
    if (options.longest_first) {
      std::stable_sort(reqs.begin(), reqs.end(), [](const SimRequest& a, const SimRequest& b) {
        return a.output_len > b.output_len;
      });
    }
    // After the first step's start, before its end (every step costs more than a nanosecond).
    if (options.first_step_alone) {
      for (std::size_t k = 1; k < reqs.size(); ++k)
        reqs[k].arrival_s = 1e-9;
    }
  }
  std::unique_ptr<sched::Scheduler> scheduler;
  try {
    scheduler = std::make_unique<sched::Scheduler>(options.scheduler);
  } catch (const Error& e) {
    return e;
  }
  if (options.step_trace != nullptr)
    *options.step_trace << sched::step_trace_header(options.scheduler, "sched_sim") << '\n';
  std::uniform_int_distribution<std::int32_t> token(0, options.vocab - 1);
  struct Live {
    std::size_t index;
    double first_s = -1;
  };
  std::unordered_map<std::uint64_t, Live> live;
  std::vector<double> ttft_ms, tpot_ms, sched_us;
  using Clock = std::chrono::steady_clock;
  SimResult res;
  double now = 0;
  double first_step_s = 0;
  double decode_rows_sum = 0;
  std::size_t next = 0;
  std::vector<std::int32_t> sampled;
  while (next < reqs.size() || !live.empty()) {
    while (next < reqs.size() && reqs[next].arrival_s <= now) {
      const SimRequest& r = reqs[next];
      std::vector<std::int32_t> prompt(static_cast<std::size_t>(r.input_len));
      for (auto& t : prompt)
        t = token(rng);
      const auto id = static_cast<std::uint64_t>(next + 1);
      if (scheduler->add(id, std::move(prompt), r.output_len)) {
        live.emplace(id, Live{next});
        res.input_tokens += r.input_len;
      } else {
        ++res.failed;
      }
      ++next;
    }
    const auto planning = Clock::now();
    sched::StepPlan plan = scheduler->plan_step();
    auto host = Clock::now() - planning;
    if (plan.empty()) {
      if (next >= reqs.size()) {
        if (live.empty()) break;
        return Error(ErrorCode::kInternal, "simulation: requests wait but no step can run");
      }
      now = std::max(now, reqs[next].arrival_s);  // idle until the next arrival
      continue;
    }
    if (options.step_trace != nullptr) {
      if (res.steps == 0) first_step_s = now;
      *options.step_trace << sched::to_json_line(sched::describe_step(
                                 *scheduler, plan, static_cast<std::uint64_t>(res.steps),
                                 (now - first_step_s) * 1e3))
                          << '\n';
    }
    double decode = 0, keys = 0, prefill = 0;
    for (const auto& s : plan.slices) {
      const sched::Sequence* seq = scheduler->find(s.id);
      if (s.token_count == 1 && seq != nullptr && s.first_position >= seq->prompt_len) {
        decode += 1;
        keys += s.first_position + 1;
      } else {
        prefill += s.token_count;
      }
    }
    now += cost.step_ms(decode, keys, prefill) / 1e3;
    ++res.steps;
    decode_rows_sum += decode;
    res.peak_held_pages = std::max(res.peak_held_pages, scheduler->pool().held_pages());
    sampled.assign(static_cast<std::size_t>(plan.sampling_slices()), 1);
    const auto completing = Clock::now();
    scheduler->complete_step(plan, sampled);
    for (const auto& s : plan.slices) {
      if (!s.samples) continue;
      auto it = live.find(s.id);
      const sched::Sequence* seq = scheduler->find(s.id);
      if (it == live.end() || seq == nullptr) continue;
      const SimRequest& r = reqs[it->second.index];
      if (it->second.first_s < 0) {
        it->second.first_s = now;
        ttft_ms.push_back((now - r.arrival_s) * 1e3);
      }
      if (seq->generated() >= r.output_len) {
        if (r.output_len > 1)
          tpot_ms.push_back((now - it->second.first_s) * 1e3 / (r.output_len - 1));
        res.output_tokens += r.output_len;
        scheduler->remove(s.id);
        live.erase(it);
      }
    }
    host += Clock::now() - completing;
    sched_us.push_back(std::chrono::duration<double, std::micro>(host).count());
  }
  res.duration_s = now;
  res.output_tok_s = now > 0 ? static_cast<double>(res.output_tokens) / now : 0;
  res.ttft_ms_p50 = percentile(ttft_ms, 0.5);
  res.ttft_ms_p99 = percentile(ttft_ms, 0.99);
  res.tpot_ms_p50 = percentile(tpot_ms, 0.5);
  res.tpot_ms_p99 = percentile(tpot_ms, 0.99);
  res.mean_step_ms = res.steps ? now * 1e3 / static_cast<double>(res.steps) : 0;
  res.mean_decode_rows = res.steps ? decode_rows_sum / static_cast<double>(res.steps) : 0;
  res.preemptions = scheduler->preemptions();
  double sum = 0;
  for (double us : sched_us)
    sum += us;
  res.sched_us_mean = sched_us.empty() ? 0 : sum / static_cast<double>(sched_us.size());
  res.sched_us_p99 = percentile(sched_us, 0.99);
  return res;
}

}  // namespace weft::bench
