#!/usr/bin/env bash
# The fuzz long run on the device machine's cores (docs/reliability.md, "The long run").
#
#   bench/device/fuzz_long.sh --pack [BUILD_DIR]   here: strip the FUZZ_TARGETS binaries of BUILD_DIR
#       (default build/fuzz) into .devcarry/fuzz/fuzz.tar.xz, and the corpora of
#       build/fuzz-work into .devcarry/fuzz/corpus.tar.xz when there are any
#   bench/device/fuzz_long.sh [SECONDS] [options]   there: the run
#
# Options of the run (environment variables in brackets):
#   --seconds S     each target fuzzes for S seconds (FUZZ_SECONDS; 480, under the tool's 10 min)
#   --jobs N        libFuzzer jobs per target (FUZZ_JOBS; default: the cores / the targets run
#                   at once, at least 1)
#   --targets "..." the targets (FUZZ_TARGETS; the five slow ones: regex json_schema
#                   chat_template config_json tokenizer_json); TARGET:N gives that target N
#                   jobs instead of --jobs (e.g. "chat_template:18 json_schema:10 regex:4")
#   --serial        one target after another, each with all the cores (then SECONDS each)
#   --bin FILE      the binaries' tarball (FUZZ_BIN; .devcarry/fuzz/fuzz.tar.xz)
#   --corpus FILE   corpora to continue (FUZZ_CORPUS; .devcarry/fuzz/corpus.tar.xz if present)
#   --slow S        an input slower than S seconds is saved as a slow unit (FUZZ_SLOW; 5)
#
# Writes to $OUT (or /tmp/fuzz-out): fuzz_summary.md (one table: executions, rate, corpus,
# crashes, slow units per target), corpus.tar.xz (every target's corpus, to carry into the
# next run with --corpus), findings.tar.gz (each target's crashes/ folder, slow units included,
# and the tail of its logs) and the scripts/fuzz output per target.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

if [ "${1:-}" = --pack ]; then
  build=${2:-build/fuzz}
  [ -d "$build/fuzz" ] || { echo "fuzz_long: no $build/fuzz (cmake --preset fuzz && cmake --build $build --target fuzz_all)" >&2; exit 1; }
  stage=$(mktemp -d)
  mkdir -p "$stage/fuzz" .devcarry/fuzz
  # Only the targets the run fuzzes (FUZZ_TARGETS, the five slow ones by default): the device
  # call carries 64 MiB with the checkout, and all thirteen binaries xz to 15 MB, these five
  # to 4.5 MB.
  for t in ${FUZZ_TARGETS:-regex json_schema chat_template config_json tokenizer_json}; do
    [ -x "$build/fuzz/fuzz_$t" ] || { echo "fuzz_long: no $build/fuzz/fuzz_$t" >&2; exit 1; }
    cp -a "$build/fuzz/fuzz_$t" "$stage/fuzz/"
  done
  # The shared libraries the binaries load from their own folder (RUNPATH $ORIGIN: the build
  # copies libsimdjson there), which the device's Ubuntu does not have: without them no fuzzer
  # starts there (the 2026-11-26 attempt).
  for l in $(cd "$build/fuzz" && ldd $(ls "$stage"/fuzz) | awk -v d="$PWD/" 'index($3, d) == 1 || $3 ~ /simdjson|onig|utf8proc|boost|icu/ {print $3}' | sort -u); do
    cp -L "$l" "$stage/fuzz/"
  done
  # Debug info off, symbols kept: the sanitizers' stack traces still name the functions.
  for f in "$stage"/fuzz/fuzz_*; do strip --strip-debug "$f"; done
  tar -C "$stage" -cf - fuzz | xz -9e -T2 > .devcarry/fuzz/fuzz.tar.xz
  rm -rf "$stage"
  echo "fuzz_long: .devcarry/fuzz/fuzz.tar.xz ($(du -h .devcarry/fuzz/fuzz.tar.xz | cut -f1))"
  if compgen -G "build/fuzz-work/fuzz_*/corpus" >/dev/null; then
    (cd build/fuzz-work && tar -cf - fuzz_*/corpus) | xz -6 -T2 > .devcarry/fuzz/corpus.tar.xz
    echo "fuzz_long: .devcarry/fuzz/corpus.tar.xz ($(du -h .devcarry/fuzz/corpus.tar.xz | cut -f1))"
  fi
  exit 0
fi

seconds=${FUZZ_SECONDS:-480}
jobs=${FUZZ_JOBS:-}
targets=${FUZZ_TARGETS:-regex json_schema chat_template config_json tokenizer_json}
bin=${FUZZ_BIN:-.devcarry/fuzz/fuzz.tar.xz}
corpus=${FUZZ_CORPUS:-.devcarry/fuzz/corpus.tar.xz}
slow=${FUZZ_SLOW:-5}
serial=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --serial) serial=1; shift ;;
    --bin) bin=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --slow) slow=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    [0-9]*) seconds=$1; shift ;;
    *) echo "fuzz_long: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
done
read -r -a specs <<< "$targets"
declare -A jobs_of
list=()
for spec in "${specs[@]}"; do
  t=${spec%%:*}
  list+=("$t")
  if [ "$spec" != "$t" ]; then
    n=${spec#*:}
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz_long: '$spec': the jobs after ':' must be a positive number" >&2; exit 2; }
    jobs_of[fuzz_${t#fuzz_}]=$n
  fi
done
[ ${#list[@]} -gt 0 ] || { echo "fuzz_long: no targets" >&2; exit 2; }
cores=$(nproc)
if [ -z "$jobs" ]; then
  if [ $serial = 1 ]; then jobs=$cores; else jobs=$(( cores / ${#list[@]} )); fi
  [ "$jobs" -ge 1 ] || jobs=1
fi
out=${OUT:-/tmp/fuzz-out}
work=/tmp/fuzz-long
mkdir -p "$out" "$work/bin"
[ -f "$bin" ] || { echo "fuzz_long: no binaries at $bin (run bench/device/fuzz_long.sh --pack here first)" >&2; exit 1; }
tar -C "$work/bin" -xJf "$bin"
# Every binary must start here (its libraries found): say which cannot, and why, before fuzzing.
for t in "${list[@]}"; do
  t=fuzz_${t#fuzz_}
  # (pipefail: the binary's own exit status; a library it cannot load makes it fail.)
  if ! msg=$("$work/bin/fuzz/$t" -help=1 2>&1 >/dev/null </dev/null | tail -3); then
    echo "fuzz_long: $t does not start here:" >&2
    ldd "$work/bin/fuzz/$t" 2>&1 | grep 'not found' >&2
    echo "$msg" >&2
    echo "(pack again with bench/device/fuzz_long.sh --pack: it carries the libraries of \$ORIGIN)" >&2
    exit 1
  fi
done
if [ -f "$corpus" ]; then
  mkdir -p "$work/fw" && tar -C "$work/fw" -xJf "$corpus"
  echo "fuzz_long: continuing the corpora of $corpus"
fi
count() { find "$1" -type f 2>/dev/null | wc -l; }
declare -A before
for t in "${list[@]}"; do
  t=fuzz_${t#fuzz_}
  before[$t]=$(count "$work/fw/$t/corpus")
done
echo "fuzz_long: $cores cores; ${specs[*]}: $jobs job(s) each unless given, $seconds s each, $([ $serial = 1 ] && echo 'one after another' || echo 'all at once')"

run_one() {
  local t=$1
  # scripts/fuzz seeds the corpus, adds the target's dictionary and -max_len, and keeps
  # crash and slow inputs in $work/fw/$t/crashes.
  scripts/fuzz "$t" "$seconds" --jobs "${jobs_of[$t]:-$jobs}" --prebuilt "$work/bin/fuzz" --work "$work/fw" \
    -- -report_slow_units="$slow" > "$out/$t.txt" 2>&1
  echo "fuzz_long: $(grep -h "^fuzz: fuzz_.*execs in" "$out/$t.txt" | tail -1)"
}
start=$(date +%s)
for t in "${list[@]}"; do
  t=fuzz_${t#fuzz_}
  if [ $serial = 1 ]; then run_one "$t"; else run_one "$t" & fi
done
wait
wall=$(( $(date +%s) - start ))

{
  echo "Fuzz long run: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), jobs per target: $(for t in "${list[@]}"; do t=fuzz_${t#fuzz_}; printf '%s %s, ' "${t#fuzz_}" "${jobs_of[$t]:-$jobs}"; done)$seconds s per target, $wall s in all"
  echo
  # What the cores really gave: a CPU quota (cgroup) or other tenants' load lowers the rates.
  echo "CPU quota $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo unknown), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| target | executions | executions/s | corpus before | corpus after | crashes | slow units | jobs stopped early | exit |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  for t in "${list[@]}"; do
    t=fuzz_${t#fuzz_}
    d=$work/fw/$t
    read -r execs cut < <(find "$d/logs" -name 'fuzz-*.log' -print0 | xargs -0 tests/fuzz/count_execs.sh)
    crashes=$(find "$d/crashes" -type f ! -name 'slow-unit-*' 2>/dev/null | wc -l)
    slows=$(find "$d/crashes" -type f -name 'slow-unit-*' 2>/dev/null | wc -l)
    rc=$(sed -n 's/.*, exit \([0-9]*\).*$/\1/p' "$out/$t.txt" | tail -1)
    echo "| \`$t\` | $execs | $(( execs / (seconds > 0 ? seconds : 1) )) | ${before[$t]} | $(count "$d/corpus") | $crashes | $slows | $cut | ${rc:-?} |"
  done
} > "$out/fuzz_summary.md"
cat "$out/fuzz_summary.md"

(cd "$work/fw" && tar -cf - fuzz_*/corpus) | xz -6 -T0 > "$out/corpus.tar.xz"
(cd "$work/fw" && for t in fuzz_*; do
   mkdir -p "/tmp/fuzz-findings/$t"
   cp -a "$t/crashes" "/tmp/fuzz-findings/$t/" 2>/dev/null
   for l in "$t"/logs/*.log; do [ -f "$l" ] && tail -60 "$l" > "/tmp/fuzz-findings/$t/$(basename "$l")"; done
 done)
tar -C /tmp/fuzz-findings -czf "$out/findings.tar.gz" .
ls -la "$out"
