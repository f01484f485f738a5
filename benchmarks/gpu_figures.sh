#!/usr/bin/env bash
# The figures of docs/measurements/gpu.md, in one run of under 10 minutes on one H100 (random weights: speed and
# memory are real, answers are not):
#   - the Llama-3.1-8B shape at 32K and 128K, budget 16,384: locret against the full cache (the Locret paper reads
#     128K at 3,209 tok/s on one RTX 4090);
#   - the SmolLM2-135M shape at 128K with SmolLM2's recorded settings (budget 4,096, chunks of 1,024);
#   - the peak GPU memory of each (torch.cuda.max_memory_allocated).
# SET=gemma3 measures docs/measurements/gpu.md's Gemma 3 rows instead: the Gemma 3 4B and 12B shapes (sliding and
# global layers) against the same shapes with every layer global, full cache and locret at budget 16,384.
# Usage: [SET=gemma3] benchmarks/gpu_figures.sh OUT_DIR
# Each bench writes OUT_DIR/NAME.json, and its stderr to OUT_DIR/stderr.log; one that fails or outlasts its limit
# leaves the others to run.
# A one-thousand-token smoke bench runs first; if it fails, its error is shown and nothing else runs.
# SHORT=1 runs the same commands at 4K and 8K, and BIG=PRESET swaps the 8B shape, to check them on a CPU first.
set -uo pipefail
out=${1:?give an output directory}
mkdir -p "$out"
python=${PYTHON:-python3}
big=${BIG:-llama-3.1-8b}
if [ "${SHORT:-0}" = 1 ]; then long=8k; short=4k; else long=128k; short=32k; fi

bench() {  # NAME SECONDS ARGS...: one `locret bench --json`, its rows to NAME.json
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  timeout "$seconds" "$python" -m locret_cli bench --samples 1 --tasks needle --json "$@" \
    >"$out/$name.json" 2> >(sed "s/^/$name: /" >>"$out/stderr.log")
  local status=$?
  echo "$name: exit $status in $((SECONDS - start)) s"
  return $status
}

"$python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
if [ "${SET:-paper}" = gemma3 ]; then
  bench smoke 90 --arch gemma3-1b --lengths 1k --policies full,locret --budget 256 --chunk-size 256 \
    || { sleep 1; tail -20 "$out/stderr.log"; exit 1; }
  for shape in gemma3-4b gemma3-4b-global; do
    bench "$shape" 130 --arch "$shape" --lengths "$short,$long" --policies locret,full --budget 16384
  done
  for shape in gemma3-12b gemma3-12b-global; do  # the global shape's full cache at 128K is 48 GiB beside 24 GiB of weights
    bench "$shape" 110 --arch "$shape" --lengths "$long" --policies locret,full --budget 16384
  done
  exit 0
fi
bench smoke 120 --arch smollm2-135m --lengths 1k --policies full,locret --budget 256 --chunk-size 256 \
  || { sleep 1; tail -20 "$out/stderr.log"; exit 1; }
bench "$big-long" 240 --arch "$big" --lengths "$long" --policies locret,full --budget 16384
bench "$big-short" 150 --arch "$big" --lengths "$short" --policies full,locret --budget 16384
bench smollm2-135m 120 --arch smollm2-135m --lengths "$long" --policies full,locret --budget 4096 \
  --chunk-size 1024 --stabilizers 256
