#!/usr/bin/env bash
# Issue 15's GPU run, for one H200 (or H100) with no model file, gguf, Panel or Playwright: random weights
# of SmolLM2's shapes. Writes everything under $OUT (default ./gpu-out):
#   throughput.json, latency.json, serve_sim.json   the benchmarks' JSON (stdout of each)
#   data/throughput.json, data/latency.json        the recorded files (--record); copy them into
#                                                  engine/bench/data/ and commit: the chapters read them
#   pytest_gpu.txt                                 `pytest -m gpu` (CUDA graphs, fused kernels, parity)
#   *.err, steps.txt                               each step's stderr; each step's exit code and seconds
# Usage: ENGINE_COMMIT=<sha> bash scripts/gpu_run.sh [throughput] [latency] [tests] [serve-sim]
# (default: all four in that order, ~5-6 minutes; each step has its own time limit (180+220+180+100 s at
# most), so one hang cannot eat the rest, and each step's files are in $OUT as soon as it ends).
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/data"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export ENGINE_COMMIT=${ENGINE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
STEPS=${*:-throughput latency tests serve-sim}

step() {   # step NAME LIMIT_S COMMAND...: run it, stdout to $OUT/NAME.json, stderr to $OUT/NAME.err
  local name=$1 limit=$2 t0=$SECONDS rc; shift 2
  timeout -k 10 "$limit" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"; rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
for s in $STEPS; do
  case $s in
    throughput)   # the issue's workload: 256 requests, prompts 100-1024, 256 new tokens; HF peers on 64
      step throughput 180 python -m engine bench throughput --random-weights --record
      cp engine/bench/data/throughput.json "$OUT/data/" 2>/dev/null ;;
    latency)      # batch 1, 8, 64 x prompts 128, 2048; HF eager everywhere, HF static+compile at 1x128
      step latency 220 python -m engine bench latency --random-weights --record
      cp engine/bench/data/latency.json "$OUT/data/" 2>/dev/null ;;
    serve-sim)    # continuous vs static batching, CUDA graphs on (the default on CUDA)
      step serve_sim 100 python -m engine bench serve-sim --model smollm2-random --num-requests 64 \
        --scale 0.5 --max-num-seqs 32 --max-num-batched-tokens 2048 ;;
    tests)        # collection errors (modules needing Panel/param) must not stop the GPU tests
      t0=$SECONDS
      timeout -k 10 180 python -m pytest -m gpu -q -p no:cacheprovider --continue-on-collection-errors \
        >"$OUT/pytest_gpu.txt" 2>&1
      echo "tests rc=$? $((SECONDS - t0))s ($(tail -n 1 "$OUT/pytest_gpu.txt"))" | tee -a "$OUT/steps.txt" ;;
    *) echo "unknown step $s" | tee -a "$OUT/steps.txt" ;;
  esac
done
ls -l "$OUT" "$OUT/data" >>"$OUT/steps.txt"
