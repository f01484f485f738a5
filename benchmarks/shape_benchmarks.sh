#!/usr/bin/env bash
# Speed and memory of full vs locret at real model shapes (random weights), as in docs/measurements/shapes.md.
# Usage: benchmarks/shape_benchmarks.sh OUT_DIR   (about 45 minutes on 2 CPU cores)
set -euo pipefail
out=${1:?give an output directory}
mkdir -p "$out"
for arch in smollm2-135m qwen2.5-0.5b; do
  locret bench --arch "$arch" --policies full,locret --lengths 8k,32k --samples 1 --json > "$out/$arch-8k-32k.json"
  locret bench --arch "$arch" --policies locret --lengths 128k --samples 1 --json > "$out/$arch-128k.json"
done
