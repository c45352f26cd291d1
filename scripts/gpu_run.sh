#!/usr/bin/env bash
# The GPU benchmarks and tests, for one H100 or H200 with no model file, gguf, Panel or Playwright: random
# weights of SmolLM2's shapes and of Llama-3-8B's and Llama-3.2-1B's (--model *-random). Writes under $OUT
# (default ./gpu-out):
#   NAME.json, NAME.err     each step's stdout (the benchmark's JSON) and stderr
#   data/*.json             the recorded files the steps wrote (--record); copy them into engine/bench/data/
#   pytest_gpu.txt          `pytest -m gpu` (CUDA graphs, fused kernels, parity)
#   steps.txt               each step's exit code and seconds (rc=124: stopped at its limit; "skipped": the
#                           run's deadline left too little time)
# Usage: ENGINE_COMMIT=<sha> [DEADLINE_S=N] bash scripts/gpu_run.sh [STEP ...]
#   steps: throughput latency prefill (SmolLM2), throughput-8b latency-8b prefill-8b (Llama-3-8B),
#   throughput-1b latency-1b prefill-1b (Llama-3.2-1B), tests, serve-sim; default: all of them in that order
#   (about 20 minutes on an H100). Each step has its own time limit (below), so one hang cannot eat the
#   rest; DEADLINE_S caps the whole run: a step gets at most what is left, and none starts with < 30 s left.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/data"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export ENGINE_COMMIT=${ENGINE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
STEPS=${*:-throughput latency prefill throughput-8b latency-8b prefill-8b throughput-1b latency-1b prefill-1b tests serve-sim}
DEADLINE_S=${DEADLINE_S:-0}
BENCH="python -m engine bench"
touch "$OUT/.start"

limit_for() {   # limit_for WANTED_S: the step's limit under the run's deadline (0: skip it)
  local left=$((DEADLINE_S - SECONDS))
  if [ "$DEADLINE_S" -le 0 ] || [ "$1" -le "$left" ]; then echo "$1"
  elif [ "$left" -ge 30 ]; then echo "$left"
  else echo 0; fi
}

step() {   # step NAME LIMIT_S COMMAND...: stdout to $OUT/NAME.json, stderr to $OUT/NAME.err, records to $OUT/data
  local name=$1 limit t0=$SECONDS rc; limit=$(limit_for "$2"); shift 2
  if [ "$limit" -eq 0 ]; then echo "$name skipped" | tee -a "$OUT/steps.txt"; return; fi
  timeout -k 10 "$limit" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"; rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s (limit ${limit}s)" | tee -a "$OUT/steps.txt"
  find engine/bench/data -name '*.json' -newer "$OUT/.start" -exec cp {} "$OUT/data/" \;
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
for s in $STEPS; do
  case $s in
    # SmolLM2's shapes: what chapters 11, 12, 14 and 20 cite. Throughput: 256 requests, prompts 100-1024,
    # 256 new tokens; every HF peer on the first 64 and on all 256 (like for like)
    throughput)    step throughput 300 $BENCH throughput --random-weights --record ;;
    latency)       step latency 220 $BENCH latency --random-weights --record ;;   # HF compile at 1x128 only
    prefill)       step prefill 90 $BENCH prefill --random-weights --record ;;
    # Llama-3-8B's shapes (16 GB of bf16 weights): ours against the computed floors, no HF peer
    throughput-8b) step throughput_8b 180 $BENCH throughput --model llama-3-8b-random --skip-hf --kv-cache-gib 40 --record ;;
    latency-8b)    step latency_8b 150 $BENCH latency --model llama-3-8b-random --skip-hf --record ;;
    prefill-8b)    step prefill_8b 120 $BENCH prefill --model llama-3-8b-random --record ;;
    throughput-1b) step throughput_1b 120 $BENCH throughput --model llama-3.2-1b-random --skip-hf --kv-cache-gib 12 --record ;;
    latency-1b)    step latency_1b 100 $BENCH latency --model llama-3.2-1b-random --skip-hf --record ;;
    prefill-1b)    step prefill_1b 90 $BENCH prefill --model llama-3.2-1b-random --record ;;
    # continuous vs static batching on one engine (chapter 14 cites its ratios): warmed on the whole workload
    serve-sim)     step serve_sim 150 $BENCH serve-sim --model smollm2-random --num-requests 64 \
                     --scale 0.5 --max-num-seqs 32 --max-num-batched-tokens 2048 --warmup full --record ;;
    tests)         # 224 s on a fresh machine (Triton compiles every kernel); collection errors (modules that
      limit=$(limit_for 420)      # need Panel/param) must not stop the GPU tests
      if [ "$limit" -eq 0 ]; then echo "tests skipped" | tee -a "$OUT/steps.txt"; continue; fi
      t0=$SECONDS
      timeout -k 10 "$limit" python -m pytest -m gpu -q -p no:cacheprovider --continue-on-collection-errors \
        >"$OUT/pytest_gpu.txt" 2>&1
      echo "tests rc=$? $((SECONDS - t0))s (limit ${limit}s) ($(tail -n 1 "$OUT/pytest_gpu.txt"))" | tee -a "$OUT/steps.txt" ;;
    *) echo "unknown step $s" | tee -a "$OUT/steps.txt" ;;
  esac
done
ls -l "$OUT" "$OUT/data" >>"$OUT/steps.txt"
