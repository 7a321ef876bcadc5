// The environment's speculation knobs (runtime/scheduler/speculation_env.hpp): the step-row
// bound under the backend's, bad values ignored; the trace file appended line by line.

#include "runtime/scheduler/speculation_env.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace weft::sched {
namespace {

struct EnvGuard {
  const char* name;
  ~EnvGuard() { ::unsetenv(name); }
};

TEST(SpeculationEnv, StepRowsBoundTheBackendsAndBadValuesAreIgnored) {
  EnvGuard guard{"WEFT_SPEC_STEP_ROWS"};
  ::unsetenv("WEFT_SPEC_STEP_ROWS");
  EXPECT_EQ(max_step_rows_from_env(0), 0);
  EXPECT_EQ(max_step_rows_from_env(16), 16);
  ::setenv("WEFT_SPEC_STEP_ROWS", "12", 1);
  EXPECT_EQ(max_step_rows_from_env(0), 12);
  EXPECT_EQ(max_step_rows_from_env(16), 12);
  EXPECT_EQ(max_step_rows_from_env(8), 8) << "never above the backend's own bound";
  for (const char* bad : {"x", "12x", "1", "-4", "5000"}) {
    ::setenv("WEFT_SPEC_STEP_ROWS", bad, 1);
    EXPECT_EQ(max_step_rows_from_env(0), 0) << bad;
    EXPECT_EQ(max_step_rows_from_env(16), 16) << bad;
  }
  ::setenv("WEFT_SPEC_STEP_ROWS", "0", 1);
  EXPECT_EQ(max_step_rows_from_env(16), 16);
}

TEST(SpeculationEnv, TheTraceAppendsOneLinePerEventAndStartsAgainWhenRemoved) {
  EnvGuard guard{"WEFT_SPEC_TRACE"};
  ::unsetenv("WEFT_SPEC_TRACE");
  EXPECT_FALSE(speculation_trace_from_env());
  const auto path = std::filesystem::temp_directory_path() /
                    ("weft-spec-env-test-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  ::setenv("WEFT_SPEC_TRACE", path.c_str(), 1);
  auto trace = speculation_trace_from_env();
  ASSERT_TRUE(trace);
  SpeculationTraceEvent e;
  e.step = 3;
  e.sequence = 9;
  e.tokens = {5};
  trace(e);
  e.step = 4;
  trace(e);
  auto lines = [&] {
    std::ifstream in(path);
    std::string line;
    int n = 0;
    while (std::getline(in, line))
      n += line.front() == '{' && line.back() == '}';
    return n;
  };
  EXPECT_EQ(lines(), 2);
  std::filesystem::remove(path);
  trace(e);
  EXPECT_EQ(lines(), 1) << "a removed file starts again";
  std::filesystem::remove(path);
  ::setenv("WEFT_SPEC_TRACE", "/nonexistent-dir/trace.jsonl", 1);
  EXPECT_FALSE(speculation_trace_from_env()) << "a file that cannot be opened traces nothing";
}

}  // namespace
}  // namespace weft::sched
