#!/usr/bin/env bash
# Installs the real client libraries the gateway tests drive (`ws`, `openai`) into PREFIX
# (the build folder's test-node). Idempotent: a second run with both present does nothing.
set -euo pipefail
prefix=${1:?usage: setup_node.sh PREFIX}
if [[ -f $prefix/node_modules/ws/package.json && -f $prefix/node_modules/openai/package.json ]]; then
  echo "setup_node: ws and openai already in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "setup_node: npm is not installed; the gateway tests need node 20+ and npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund ws openai
test -f "$prefix/node_modules/ws/package.json" && test -f "$prefix/node_modules/openai/package.json"
echo "setup_node: installed ws and openai in $prefix"
