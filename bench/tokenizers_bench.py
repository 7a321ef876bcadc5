#!/usr/bin/env python3
"""Hugging Face `tokenizers` side of bench/tokenizer_bench.cpp: same chunks, same hash.

Single thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), encode() per chunk, best of N.
Usage: tokenizers_bench.py TOKENIZER_JSON TEXT_FILE [REPEATS]
"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def chunks_of(text, chunk_bytes=1 << 16):
    chunks, current, size = [], [], 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if i + 1 < len(lines):
            line += "\n"
        elif not line:
            break
        current.append(line)
        size += len(line.encode("utf-8"))
        if size >= chunk_bytes:
            chunks.append("".join(current))
            current, size = [], 0
    if current:
        chunks.append("".join(current))
    return chunks


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    chunks = chunks_of(text)
    best, tokens, digest = None, 0, 0
    for _ in range(repeats):
        start = time.perf_counter()
        encodings = [tok.encode(c, add_special_tokens=False) for c in chunks]
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    digest = 1469598103934665603
    tokens = 0
    for e in encodings:
        tokens += len(e.ids)
        for i in e.ids:
            for k in range(4):
                digest = ((digest ^ ((i >> (8 * k)) & 0xFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    print(f"tokenizers {tokenizers.__version__}: {len(data)} bytes, {len(chunks)} chunks, {tokens} tokens, "
          f"best of {repeats}: {best:.3f} s, {len(data) / best / 1e6:.2f} MB/s, ids fnv1a {digest:016x}")


if __name__ == "__main__":
    main()
