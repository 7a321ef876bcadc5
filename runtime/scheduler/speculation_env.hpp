#pragma once
// What the environment changes in speculative decoding, for diagnosing a backend's exactness
// on the machine where it runs (docs/speculative.md#diagnosis):
//   WEFT_SPEC_TRACE=FILE     every engine appends a JSON line to FILE per verification and per
//                            catch-up chunk (speculation_trace.hpp);
//   WEFT_SPEC_STEP_ROWS=N    a step's decode and verification rows at most N (each of n
//                            decoding sequences gets at most (N - n) / n draft tokens), below
//                            the backend's own bound (ForwardBackend::exact_verify_rows) if it
//                            has one; 0 or unset: the backend's bound.

#include <functional>

#include "runtime/scheduler/speculation_trace.hpp"

namespace weft::sched {

// WEFT_SPEC_TRACE's file, or null when the variable is unset or empty.
std::function<void(const SpeculationTraceEvent&)> speculation_trace_from_env();

// SpeculationConfig::max_step_rows for a backend whose own bound is `backend_rows` (0: none),
// with WEFT_SPEC_STEP_ROWS applied; a value that is not a whole number from 2 to 1024 is
// reported on stderr and ignored.
int max_step_rows_from_env(int backend_rows);

}  // namespace weft::sched
