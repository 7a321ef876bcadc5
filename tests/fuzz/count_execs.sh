#!/usr/bin/env bash
# Sums the executions in libFuzzer logs: tests/fuzz/count_execs.sh LOG...
# Prints "EXECUTIONS CUT" where CUT is the number of logs that ended without libFuzzer's final
# statistics (a job stopped by a crash, a timeout or an out-of-memory report prints none). For
# those, the last status line ("#N ...") counts: the executions it had done when it stopped.
awk '
  FNR == 1 { if (NR > 1) finish(); final = -1; last = 0 }
  /^stat::number_of_executed_units:/ { final = $2 }
  /^#[0-9]+\t/ { n = substr($1, 2) + 0; if (n > last) last = n }
  function finish() { if (final >= 0) sum += final; else { sum += last; cut++ } }
  END { if (NR > 0) finish(); printf "%d %d\n", sum, cut }
' "$@" /dev/null
