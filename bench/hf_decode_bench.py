#!/usr/bin/env python3
"""Hugging Face transformers' decode throughput on a random Llama-shaped model, the baseline
cuda_forward_bench is compared with (docs/cuda.md). Weights are random bf16 made on the GPU
from a config (nothing downloaded). Decode time per step = (generate(1 + N) - generate(1)) / N.

  python3 bench/hf_decode_bench.py --shape 8b --batch 64 --context 512 --steps 32
"""
import argparse
import json
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
               num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               head_dim=128, tie_word_embeddings=False),
    "1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
               num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
               head_dim=64, tie_word_embeddings=True),
    # Llama-3-70B's widths; 80 layers are 141 GB of bf16: bench/make_random_model.py --layers
    # makes fewer (bench/gpu_tp.sh: 10).
    "70b": dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672,
                num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                head_dim=128, tie_word_embeddings=False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8b", choices=SHAPES)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    config = LlamaConfig(**SHAPES[a.shape], max_position_embeddings=4096)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    rows = []
    for batch in a.batch:
        ids = torch.randint(1, config.vocab_size, (batch, a.context), device="cuda")
        def run(new):
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            return time.perf_counter() - start
        run(2)  # warm up
        step = (run(1 + a.steps) - run(1)) / a.steps
        rows.append({"batch": batch, "context": a.context, "ms": step * 1e3,
                     "tokens_per_s": batch / step})
        print(f"transformers {transformers.__version__} (torch {torch.__version__}) decode "
              f"{a.shape} batch {batch} context "
              f"{a.context}: {step * 1e3:.2f} ms/step, {batch / step:.0f} tokens/s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": a.shape, "rows": rows}, f)


if __name__ == "__main__":
    main()
