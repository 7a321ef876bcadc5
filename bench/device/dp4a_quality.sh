#!/usr/bin/env bash
# Device call on one GPU (issue #16): does the dp4a product (x rounded to 8-bit integers) change
# what a quantized model says? On weft-tiny (a trained model, CUDA, bf16 activations):
#   1. model_cuda_test '*Quantized*' (every format on the GPU against the CPU model: prefill,
#      chunks, then greedy decode steps through dp4a for q4);
#   2. greedy generation, 8 prompts (300 characters of held-out text each, at 8 offsets) x 160
#      tokens, q4_b32 and q4_b64, WEFT_QUANT_GEMV=lanes against the default (dp4a): how many
#      tokens agree before the first difference;
#   3. cuda_forward_bench --profile, 8B shape, batch 1, q4_b32 with dp4a and with lanes: the
#      decode step's device time per kernel class.
# Input: .devcarry/dp4aq (bin/{model_cuda_test,cuda_forward_bench}, and weft if it fits the
# 64 MiB carry: parts 2 and 3 run only where their binaries came; on 2026-11-27 weft did not fit
# beside the others and the greedy part did not run).
#   run(kind="nvidia-h100-x1", carry=[".devcarry/dp4aq"], command="bash bench/device/dp4a_quality.sh")
set -u
t0=$(date +%s)
st() { echo "[t+$(($(date +%s) - t0))s] $*"; }
. bench/device/carry.sh "${CARRY:-dp4aq}"
. bench/device/fwdruns.sh
timeout 200 "$B/model_cuda_test" --gtest_color=no --gtest_filter='*Quantiz*' >"$O/mt.log" 2>&1
echo "model_cuda_test quantized: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$O/mt.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|worst" "$O/mt.log" | head -20
if [ -x "$B/weft" ]; then
st "greedy"
python3 - "$B/weft" "$O" <<'PY'
import json, os, subprocess, sys
weft, out = sys.argv[1], sys.argv[2]
text = open("models/weft-tiny/heldout-head.txt", encoding="utf-8").read()
prompts = [text[i * len(text) // 9:][:300] for i in range(8)]
def gen(q, kernel, prompt):
    env = dict(os.environ)
    if kernel:
        env["WEFT_QUANT_GEMV"] = kernel
    r = subprocess.run([weft, "generate", "--model", "models/weft-tiny", "--device", "cuda",
                        "--quantize", q, "--temperature", "0", "--max-tokens", "160",
                        "--ignore-eos", "--format", "json", "--prompt", prompt],
                       env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, r.stderr[-300:]
    ids = [json.loads(l)["id"] for l in r.stdout.splitlines() if l.strip().startswith('{"id"')]
    return ids, None
for q in ["q4_b32", "q4_b64"]:
    agree = []
    for i, p in enumerate(prompts):
        a, ea = gen(q, "lanes", p)
        b, eb = gen(q, None, p)
        if a is None or b is None:
            print(q, i, "failed:", ea or eb); continue
        ta, tb = a, b
        if not ta:
            print(q, i, "no token ids"); break
        n = next((k for k in range(min(len(ta), len(tb))) if ta[k] != tb[k]), min(len(ta), len(tb)))
        agree.append(n)
    print(f"{q}: tokens equal before the first difference, lanes vs dp4a, per prompt: {agree} (of 160)")
PY
fi
if [ -x "$B/cuda_forward_bench" ]; then
st "profile"
fb prof_dp4a -- "$F" --batches 1 --quantize q4_b32 --profile
grep -A30 -E "^decode" "$O/prof_dp4a.txt" | head -40
fb prof_lanes WEFT_QUANT_GEMV=lanes -- "$F" --batches 1 --quantize q4_b32 --profile
grep -A30 -E "^decode" "$O/prof_lanes.txt" | head -40
fi
st "done"
