// The step trace (runtime/scheduler/step_trace.hpp): what a plan runs, counted as the
// simulation's step cost counts it, and who it admitted, in order.

#include "runtime/scheduler/step_trace.hpp"

#include <gtest/gtest.h>

namespace weft::sched {
namespace {

std::vector<std::int32_t> prompt(int n) {
  return std::vector<std::int32_t>(static_cast<std::size_t>(n), 7);
}

TEST(StepTrace, CountsDecodeAndPrefillRowsAndTheAdmittedInQueueOrder) {
  SchedulerConfig config;
  config.page_size = 4;
  config.num_pages = 64;
  config.max_tokens_per_step = 12;
  Scheduler s(config);
  ASSERT_TRUE(s.add(1, prompt(5), 3));
  ASSERT_TRUE(s.add(2, prompt(4), 9));
  ASSERT_TRUE(s.add(3, prompt(6), 2));

  // Step 0: 5 + 4 prompt tokens, then 3 of the third prompt (the budget is 12).
  StepPlan plan = s.plan_step();
  StepTraceRecord r = describe_step(s, plan, 0, 0.0);
  EXPECT_EQ(r.decode_rows, 0);
  EXPECT_EQ(r.prefill_rows, 12);
  EXPECT_EQ(r.prefill_sequences, 3);
  EXPECT_EQ(r.running, 3);
  EXPECT_EQ(r.waiting, 0);
  ASSERT_EQ(r.admitted.size(), 3u);
  EXPECT_EQ(r.admitted[0].prompt_len, 5);
  EXPECT_EQ(r.admitted[0].max_new_tokens, 3);
  EXPECT_EQ(r.admitted[1].max_new_tokens, 9);
  EXPECT_EQ(r.admitted[2].prompt_len, 6);
  EXPECT_EQ(r.kv_pages_held, 2 + 1 + 1);
  s.complete_step(plan, std::vector<std::int32_t>{1, 1});  // the first two sample

  // Step 1: two decode rows (at positions 5 and 4, reading 6 and 5 keys) and the third
  // prompt's last 3 tokens; nobody admitted. Pages: 2 + 2 (the second's fifth token opens a
  // page) + 2.
  plan = s.plan_step();
  r = describe_step(s, plan, 1, 12.5);
  EXPECT_EQ(r.step, 1u);
  EXPECT_EQ(r.decode_rows, 2);
  EXPECT_EQ(r.decode_keys, 6 + 5);
  EXPECT_EQ(r.prefill_rows, 3);
  EXPECT_EQ(r.prefill_sequences, 1);
  EXPECT_TRUE(r.admitted.empty());
  EXPECT_EQ(to_json_line(r),
            "{\"step\":1,\"t_ms\":12.500,\"running\":3,\"waiting\":0,\"decode_rows\":2,"
            "\"decode_keys\":11,\"prefill_rows\":3,\"prefill_sequences\":1,\"preempted\":0,"
            "\"kv_pages_held\":6,\"admitted\":[]}");
}

TEST(StepTrace, HeaderNamesTheSettingsBothSidesMustShare) {
  SchedulerConfig config;
  config.page_size = 16;
  config.num_pages = 2048;
  config.prefix_cache = true;
  EXPECT_EQ(step_trace_header(config, "engine"),
            "{\"trace\":\"weft-steps\",\"page_size\":16,\"kv_pages\":2048,"
            "\"max_tokens_per_step\":512,\"max_running\":256,\"admission\":\"reserve\","
            "\"schedule_policy\":\"fcfs\","
            "\"prefix_cache\":true,\"source\":\"engine\"}");
}

}  // namespace
}  // namespace weft::sched
