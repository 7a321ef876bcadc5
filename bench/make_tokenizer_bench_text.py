#!/usr/bin/env python3
"""Builds the mixed text that bench/tokenizer_bench.cpp encodes.

English prose (Debian's license texts and package copyright files), C++ code (libstdc++ 12
headers) and the multilingual parity corpus, 50 times over. Built from files every Debian 12
machine with g++ 12 has, so the same bytes can be made again; docs/PERFORMANCE.md records the
sha256 of the copy measured. Usage: bench/make_tokenizer_bench_text.py OUT_FILE
"""
import glob
import json
import os
import sys


def take(paths, limit):
    """Whole lines of the files, in sorted order, up to `limit` bytes (never a split character)."""
    out, size = [], 0
    for path in sorted(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                n = len(line.encode("utf-8"))
                if size + n > limit:
                    return "".join(out)
                out.append(line)
                size += n
    return "".join(out)


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    corpus = os.path.join(here, "tests/fixtures/tokenizers/corpus.jsonl")
    with open(corpus, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    parts = [
        take(glob.glob("/usr/share/common-licenses/*"), 1 << 20),
        take(glob.glob("/usr/share/doc/*/copyright"), 1_500_000),
        take(glob.glob("/usr/include/c++/12/bits/*.h"), 1_500_000),
        "\n".join(lines * 50),
    ]
    with open(sys.argv[1], "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))


if __name__ == "__main__":
    main()
