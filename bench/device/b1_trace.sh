#!/usr/bin/env bash
# Device call on one GPU (session of 2026-11-26, afternoon): executor_cuda_test after the code
# moves, then where a batch-1 decode step's time goes, kernel by kernel, inside its CUDA graph:
# nsys traces of cuda_forward_bench (8B shape, context 512, batch 1) for bf16 and q4_b32, with
# --cuda-graph-trace=node, summarised per kernel name (total, count, mean) over the timed steps.
# Input: .devcarry/b1t/gpu.tar.xz (bin/{executor_cuda_test,cuda_forward_bench}, lib/).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/b1t"], command="bash bench/device/b1_trace.sh")
# PHASES (default "tests trace"), FORMATS (default "bf16 q4_b32").
set -u
. bench/device/carry.sh b1t
PHASES=${PHASES:-"tests trace"}
FORMATS=${FORMATS:-"bf16 q4_b32"}
case " $PHASES " in *" tests "*)
  s=$(date +%s)
  timeout 240 $d/bin/executor_cuda_test --gtest_color=no > "$O/executor_cuda_test.log" 2>&1
  echo "executor_cuda_test rc=$? ($(( $(date +%s) - s )) s)"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|tests ran|^\[  FAILED" "$O/executor_cuda_test.log" | sort | uniq -c | head -20
;; esac
case " $PHASES " in *" trace "*)
  NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  echo "nsys: ${NSYS:-none}"
  for f in $FORMATS; do
    q=(); [ "$f" != bf16 ] && q=(--quantize "$f")
    args=(--shape 8b --batches 1 --prefill "" --repeats 20 "${q[@]}")
    s=$(date +%s)
    timeout 200 $d/bin/cuda_forward_bench "${args[@]}" > "$O/fwd_$f.txt" 2>&1
    echo "== $f plain run rc=$? ($(( $(date +%s) - s )) s)"; grep -E "^decode" "$O/fwd_$f.txt"
    [ -n "${NSYS:-}" ] || continue
    s=$(date +%s)
    timeout 240 "$NSYS" profile --cuda-graph-trace=node --trace=cuda --sample=none --cpuctxsw=none \
      -o "$O/trace_$f" --force-overwrite true $d/bin/cuda_forward_bench "${args[@]}" > "$O/nsys_$f.log" 2>&1
    echo "nsys $f rc=$? ($(( $(date +%s) - s )) s)"
    "$NSYS" stats --report cuda_gpu_kern_sum --format csv --output "$O/kern_$f" "$O/trace_$f.nsys-rep" > /dev/null 2>&1
    ls "$O"/kern_"$f"* 2>/dev/null | head -2
    python3 - "$O" "$f" <<'PY'
import csv, glob, sys
o, f = sys.argv[1], sys.argv[2]
files = glob.glob(f"{o}/kern_{f}*.csv")
if not files: print("no kernel summary"); sys.exit()
rows = list(csv.DictReader(open(files[0])))
tot = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"{f}: {len(rows)} kernel names, {tot/1e6:.1f} ms of kernels in all")
for r in rows[:28]:
    name = r["Name"][:90]
    print(f'{float(r["Total Time (ns)"])/1e6:9.3f} ms {int(r["Instances"]):7d} x {float(r["Avg (ns)"])/1e3:8.2f} us  {name}')
PY
    rm -f "$O/trace_$f.sqlite" "$O/trace_$f.nsys-rep"
  done
;; esac
