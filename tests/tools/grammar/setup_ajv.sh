#!/usr/bin/env bash
# Installs ajv and ajv-formats (the JSON Schema validator the grammar corpus test checks
# outputs with) into PREFIX, a folder of the build tree. Idempotent.
set -euo pipefail
prefix=${1:?usage: setup_ajv.sh PREFIX}
if [[ -f $prefix/node_modules/ajv/package.json && -f $prefix/node_modules/ajv-formats/package.json ]]; then
  echo "setup_ajv: ajv and ajv-formats already in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "setup_ajv: npm is not installed; the grammar corpus test needs node 20+ and npm" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund ajv@8 ajv-formats@3
test -f "$prefix/node_modules/ajv/package.json" && test -f "$prefix/node_modules/ajv-formats/package.json"
echo "setup_ajv: installed ajv and ajv-formats in $prefix"
