#!/usr/bin/env python3
"""weft bench's step phases (docs/engine.md#step-phases): the same run with the overlapped step
loop and the serial one gives the same output (digest, token counts); both JSON objects carry
"step_phases" with every phase's total and mean per step, and only the overlapped run has
overlapped steps.

Usage: step_phases_check.py WEFT
"""
import json
import subprocess
import sys

PHASES = ["plan", "batch", "launch", "launch_prepare", "mask_wait", "detokenize_wait",
          "sampler_prepare", "sample", "sampler_finish", "complete", "accept_wait", "finish",
          "step", "gap"]


def bench(weft, overlap):
    out = subprocess.run(
        [weft, "bench", "--num-requests", "12", "--input-len", "16", "--output-len", "24",
         "--range-ratio", "0.5", "--seed", "4", "--threads", "1", "--overlap-steps", overlap],
        check=True, capture_output=True, text=True).stdout
    lines = out.strip().splitlines()
    if not any(l.startswith("step phases, mean us per step") for l in lines):
        sys.exit(f"--overlap-steps {overlap}: no step phases line in the summary:\n{out}")
    return json.loads(lines[-1])


def main():
    weft = sys.argv[1]
    on, off = bench(weft, "on"), bench(weft, "off")
    for name, run in (("on", on), ("off", off)):
        if run["failed"] != 0:
            sys.exit(f"--overlap-steps {name}: {run['failed']} requests failed")
        p = run.get("step_phases")
        if p is None:
            sys.exit(f"--overlap-steps {name}: no step_phases in {run}")
        for table in ("total_ms", "per_step_us"):
            missing = [k for k in PHASES if k not in p[table]]
            if missing:
                sys.exit(f"--overlap-steps {name}: step_phases.{table} lacks {missing}")
        if p["steps"] != run["steps"] or p["steps"] == 0:
            sys.exit(f"--overlap-steps {name}: step_phases.steps {p['steps']}, steps {run['steps']}")
        for k in ("plan", "launch", "sample", "step"):
            if not p["per_step_us"][k] > 0:
                sys.exit(f"--overlap-steps {name}: step_phases.per_step_us.{k} is not > 0: {p}")
        parts = sum(p["total_ms"][k] for k in ("plan", "batch", "launch", "sample", "complete"))
        if p["total_ms"]["step"] < parts * 0.99:
            sys.exit(f"--overlap-steps {name}: the step total {p['total_ms']['step']} ms is less "
                     f"than its phases' {parts} ms")
    if on["overlap_steps"] != "on" or off["overlap_steps"] != "off":
        sys.exit("overlap_steps not reported as given")
    if on["step_phases"]["overlapped_steps"] == 0 or off["step_phases"]["overlapped_steps"] != 0:
        sys.exit(f"overlapped_steps: on {on['step_phases']['overlapped_steps']}, "
                 f"off {off['step_phases']['overlapped_steps']}")
    for k in ("output_digest", "output_tokens", "input_tokens", "finished_stop"):
        if on[k] != off[k]:
            sys.exit(f"{k}: overlapped {on[k]}, serial {off[k]}")
    print(f"step phases reported; same output ({on['output_digest']}, "
          f"{on['output_tokens']} tokens); {on['step_phases']['overlapped_steps']} of "
          f"{on['steps']} steps overlapped")


if __name__ == "__main__":
    main()
