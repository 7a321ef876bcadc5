#!/usr/bin/env python3
"""Writes a ShareGPT-shaped serving workload for `weft bench --dataset FILE`.

Each line of the output is one request: {"input_len": N, "output_len": M}. `weft bench` fills
the prompt with seeded random token ids (the weights are random too, so text would add nothing)
and generates exactly M tokens (EOS ignored), as vLLM's and SGLang's throughput benchmarks do
with `--ignore-eos`.

Where the numbers come from (nothing is downloaded; these are published figures):
- Mean lengths: vLLM's `vllm bench serve` on 1,000 ShareGPT prompts
  (ShareGPT_V3_unfiltered_cleaned_split, the file SGLang's and vLLM's published H100 figures
  use) with the Llama-3.1-8B-Instruct tokenizer printed "Total input tokens: 229711" and
  "Total generated tokens: 203068" (github.com/vllm-project/vllm pull request 18566,
  2025-05-22): a mean of 229.7 input and 203.1 output tokens per request.
- Filter: both benchmarks drop conversations whose prompt or reply has fewer than 4 tokens,
  whose prompt has more than 1,024 tokens, or whose prompt plus reply exceed 2,048 tokens.
- Shape: ShareGPT's lengths are heavy-tailed with most requests short (Kwon et al., "Efficient
  Memory Management for Large Language Model Serving with PagedAttention", SOSP 2023,
  Figure 11). We model each length as log-normal with sigma 1.0 (inputs) and 0.9 (outputs), an
  assumption of this script, not a published figure; mu is solved so that the mean after the
  filter above matches the published mean. The script prints the mean, median and p99 it wrote.

    python3 bench/make_sharegpt_workload.py --out build/sharegpt_1000.jsonl
    weft bench --model DIR --dataset build/sharegpt_1000.jsonl            # offline: all at once
    weft bench --model DIR --dataset build/sharegpt_1000.jsonl --request-rate 8   # online
"""

import argparse
import json
import math
import random
import sys

INPUT_MEAN = 229711 / 1000
OUTPUT_MEAN = 203068 / 1000
INPUT_SIGMA = 1.0
OUTPUT_SIGMA = 0.9
MIN_LEN, MAX_INPUT, MAX_TOTAL = 4, 1024, 2048


def draw(rng, mu_in, mu_out):
    """One request that passes the benchmarks' filter (rejection sampling)."""
    while True:
        i = int(round(rng.lognormvariate(mu_in, INPUT_SIGMA)))
        o = int(round(rng.lognormvariate(mu_out, OUTPUT_SIGMA)))
        if i >= MIN_LEN and o >= MIN_LEN and i <= MAX_INPUT and i + o <= MAX_TOTAL:
            return i, o


def fit(seed, n=20000):
    """mu for inputs and outputs such that the filtered means match the published ones."""
    mu_in = math.log(INPUT_MEAN) - INPUT_SIGMA**2 / 2
    mu_out = math.log(OUTPUT_MEAN) - OUTPUT_SIGMA**2 / 2
    for _ in range(30):
        rng = random.Random(seed)
        pairs = [draw(rng, mu_in, mu_out) for _ in range(n)]
        mean_in = sum(p[0] for p in pairs) / n
        mean_out = sum(p[1] for p in pairs) / n
        step_in = math.log(INPUT_MEAN / mean_in)
        step_out = math.log(OUTPUT_MEAN / mean_out)
        mu_in += step_in
        mu_out += step_out
        if abs(step_in) < 1e-3 and abs(step_out) < 1e-3:
            break
    return mu_in, mu_out


def quantile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the JSON-lines file to write")
    ap.add_argument("--num-requests", type=int, default=1000, help="requests (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    args = ap.parse_args()
    if args.num_requests < 1:
        sys.exit("make_sharegpt_workload: --num-requests must be at least 1")
    mu_in, mu_out = fit(args.seed + 1)
    rng = random.Random(args.seed)
    rows = [draw(rng, mu_in, mu_out) for _ in range(args.num_requests)]
    with open(args.out, "w") as f:
        for i, o in rows:
            f.write(json.dumps({"input_len": i, "output_len": o}) + "\n")
    for name, k in (("input", 0), ("output", 1)):
        v = [r[k] for r in rows]
        print(f"{name}: mean {sum(v) / len(v):.1f}, median {quantile(v, 0.5)}, "
              f"p99 {quantile(v, 0.99)}, max {max(v)} tokens")
    print(f"wrote {len(rows)} requests to {args.out}")


if __name__ == "__main__":
    main()
