#!/usr/bin/env python3
"""Writes a `weft bench --dataset` workload whose outputs copy their prompts, for a model made by
`bench/make_random_model.py --copying` (issue #17: prompt lookup on a summary-like prompt, on
the GPU, with the 8B step's cost; a random-weight model does not copy its input otherwise).

Such a model adds nothing to the residual stream in its layers, so its greedy next token is
f(t) = argmax(lm_head . rmsnorm(embed[t]) * norm): a fixed function of the current token. From
a random start, t, f(t), f(f(t)), ... enters a cycle (for a random function on 128K tokens,
after a few hundred steps, with a cycle of a few hundred). A prompt that is the first
--input-len tokens of that walk holds the cycle, so the greedy continuation is already in the
prompt, as a summary's sentences are in its source. --corrupt R replaces that share of the
prompt's tokens (never its last) with random ones, so some of prompt lookup's drafts fail.

  python3 bench/make_copy_workload.py --model /tmp/copy8b --out copy.jsonl \\
      --requests 64 --input-len 1024 --output-len 256 [--corrupt 0.25]

Prints, per workload, how much of the expected output its prompts hold (the share of output
positions whose last 3 tokens and next token occur in the prompt), computed here in fp32 from
the weights; weft's bf16 argmax may differ at a near-tie, which only moves acceptance, never
correctness (the bench compares speculative and plain outputs).
"""
import argparse
import json
import os
import random

import torch
from safetensors import safe_open


def load(folder, names):
    found = {}
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(folder, f), framework="pt", device="cuda") as st:
            for k in st.keys():
                if k in names:
                    found[k] = st.get_tensor(k).float()
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"make_copy_workload: {folder} lacks {missing}")
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a folder of make_random_model.py --copying")
    ap.add_argument("--out", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--corrupt", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    tied = cfg.get("tie_word_embeddings", False)
    names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if tied else ["lm_head.weight"])
    w = load(a.model, names)
    embed, norm = w["model.embed_tokens.weight"], w["model.norm.weight"]
    head = embed if tied else w["lm_head.weight"]
    eps = cfg.get("rms_norm_eps", 1e-5)

    def step(tokens):
        h = embed[tokens]
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm
        return torch.argmax(h @ head.t(), dim=-1)

    rng = random.Random(a.seed)
    vocab = cfg["vocab_size"]
    total = a.input_len + a.output_len
    cur = torch.tensor([rng.randrange(vocab) for _ in range(a.requests)], device="cuda")
    walk = [cur]
    for _ in range(total - 1):
        cur = step(cur)
        walk.append(cur)
    walk = torch.stack(walk, dim=1).tolist()
    held, lines = 0, []
    for row in walk:
        prompt, out = row[:a.input_len], row[a.input_len:]
        for i in range(a.input_len - 1):
            if rng.random() < a.corrupt:
                prompt[i] = rng.randrange(vocab)
        grams = {tuple(prompt[i:i + 4]) for i in range(len(prompt) - 3)}
        seq = prompt + out
        held += sum(tuple(seq[j - 3:j + 1]) in grams for j in range(a.input_len, total))
        lines.append(json.dumps({"prompt_ids": prompt, "output_len": a.output_len}))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"make_copy_workload: {a.requests} requests of {a.input_len} + {a.output_len} tokens -> "
          f"{a.out}; corrupt {a.corrupt}; output positions held by the prompt: "
          f"{held / (a.requests * a.output_len):.1%}")


if __name__ == "__main__":
    main()
