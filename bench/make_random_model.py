#!/usr/bin/env python3
"""Writes a Hugging Face model folder with random bf16 weights of a Llama shape, for end-to-end
benchmarks (`weft bench --model DIR`, constrained decoding with a real 128K vocabulary) where a
real checkpoint cannot be downloaded. Weights are drawn on the GPU by transformers' own
initialisation (normal, std 0.02) and saved as safetensors shards; the tokenizer files come
from a folder you give (e.g. the Llama-3 tokenizer that scripts/fetch-test-data fetches).

  python3 bench/make_random_model.py --shape 8b --tokenizer DIR --out /tmp/llama8b
  python3 bench/make_random_model.py --shape 70b --layers 10 --tokenizer DIR --out /tmp/llama70b-10

--layers N keeps a shape's widths with N layers (70b's 80 layers would not fit one GPU).
--copying zeroes every layer's o_proj and down_proj: the layers still read and compute all their
weights (the same bytes and FLOPs a step), but add nothing to the residual stream, so each next
token is a fixed function of the current one. Its greedy output walks that function's cycle,
which a prompt can hold: bench/make_copy_workload.py writes such prompts, a workload where the
output copies the input (issue #17's self-drafting case) on a model with the 8B step's cost.
"""
import argparse
import os
import shutil
import time

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from hf_decode_bench import SHAPES  # the same shapes the transformers baseline builds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8b", choices=SHAPES)
    ap.add_argument("--tokenizer", required=True, help="folder with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0, help="layers (default: the shape's)")
    ap.add_argument("--copying", action="store_true",
                    help="zero o_proj and down_proj: the next token depends on the current one only")
    a = ap.parse_args()
    start = time.time()
    torch.manual_seed(a.seed)
    shape = dict(SHAPES[a.shape])
    if a.layers > 0:
        shape["num_hidden_layers"] = a.layers
    config = LlamaConfig(**shape, max_position_embeddings=8192, rope_theta=500000.0,
                         bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16")
    # Drawn in bf16 directly: an fp32 model first would need twice the GPU memory.
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    if a.copying:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    model.generation_config = GenerationConfig(bos_token_id=128000, eos_token_id=128001)
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True, max_shard_size="4GB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer, name), os.path.join(a.out, name))
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"make_random_model: {a.shape} ({shape['num_hidden_layers']} layers{', copying' if a.copying else ''}) -> {a.out}, {size / 1e9:.1f} GB in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
