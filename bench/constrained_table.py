#!/usr/bin/env python3
"""The table of bench/gpu_constrained.sh: constrained against unconstrained, per case.

Reads the runs' JSON lines (each tagged "bN FORMAT constrained|unconstrained" with its
repetition "rep") and prints a Markdown table, one row per case (batch, format). Each
repetition pairs a constrained run with the unconstrained replay of the same work; the ratio
(constrained / unconstrained output tok/s) and the TTFT p50 difference (constrained -
unconstrained, ms) are taken per pair, then their mean, min and max over the repetitions are
printed with a verdict against issue #21's goal (ratio >= 0.95, TTFT diff <= +10 ms):
"met" when every repetition meets it, "missed" when none does, otherwise "mean met" or
"mean missed" (the repetitions disagree; more of them would tell).

Usage: constrained_table.py RUNS.jsonl [--ratio-goal 0.95] [--ttft-goal-ms 10]
"""
import argparse
import collections
import json
import sys


def verdict(values, ok):
    hits = sum(1 for v in values if ok(v))
    if hits == len(values):
        return "met"
    if hits == 0:
        return "missed"
    return "mean met" if ok(sum(values) / len(values)) else "mean missed"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs")
    ap.add_argument("--ratio-goal", type=float, default=0.95)
    ap.add_argument("--ttft-goal-ms", type=float, default=10.0)
    args = ap.parse_args()
    # (batch, format) -> rep -> {"constrained": run, "unconstrained": run}
    cases = collections.OrderedDict()
    with open(args.runs) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
                b, fmt, kind = d["tag"].split()
            except (ValueError, KeyError) as e:
                sys.exit(f"constrained_table.py: {args.runs}:{n}: not a tagged run ({e})")
            cases.setdefault((b[1:], fmt), collections.defaultdict(dict))[d.get("rep", 1)][kind] = d
    mean = lambda xs: sum(xs) / len(xs)
    print("| batch | format | reps | out tok/s c / u (mean) | ratio mean [min, max] | tok/s goal "
          "| TTFT p50 ms c / u (mean) | diff ms mean [min, max] | TTFT goal | ITL p50 ms c / u | stop | forced |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for (b, fmt), reps in cases.items():
        pairs = [(r["constrained"], r["unconstrained"]) for _, r in sorted(reps.items())
                 if "constrained" in r and "unconstrained" in r]
        if not pairs:
            continue
        ratios = [c["output_tokens_per_s"] / u["output_tokens_per_s"] for c, u in pairs]
        diffs = [c["ttft_ms_p50"] - u["ttft_ms_p50"] for c, u in pairs]
        tc = mean([c["output_tokens_per_s"] for c, _ in pairs])
        tu = mean([u["output_tokens_per_s"] for _, u in pairs])
        fc = mean([c["ttft_ms_p50"] for c, _ in pairs])
        fu = mean([u["ttft_ms_p50"] for _, u in pairs])
        ic = mean([c["itl_ms_p50"] for c, _ in pairs])
        iu = mean([u["itl_ms_p50"] for _, u in pairs])
        last = pairs[-1][0]
        print(f"| {b} | {fmt} | {len(pairs)} | {tc:.1f} / {tu:.1f} "
              f"| {mean(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] "
              f"| {verdict(ratios, lambda r: r >= args.ratio_goal)} "
              f"| {fc:.1f} / {fu:.1f} | {mean(diffs):+.1f} [{min(diffs):+.1f}, {max(diffs):+.1f}] "
              f"| {verdict(diffs, lambda d: d <= args.ttft_goal_ms)} "
              f"| {ic:.2f} / {iu:.2f} | {last.get('finished_stop', '-')} "
              f"| {last.get('jump_forward_tokens', '-')} |")


if __name__ == "__main__":
    main()
