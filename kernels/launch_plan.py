"""How the Triton paged-attention kernel is launched for a given batch: tile sizes, layout, splits.

Pure Python, decided from shapes alone (no device sync). The numbers come from `python -m kernels.bench.tune`
on an H200 (bf16, SmolLM2 shapes, block size 16); see kernels/NOTES.md for the measurements.

Decode reads every K/V byte once, so the plan is about keeping enough loads in flight:
- one kv head per program, the context split across programs (split-KV) until there are about six
  programs per SM, but never fewer than 64 keys per split, and no split under 512 keys;
- many programs or short splits take 64-position tiles on 2 warps, few long ones 128 on 4 warps.
Prefill and mixed batches pack 64 (query, head) rows per program so the matrix units see real tiles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import triton

MIN_KEYS_PER_SPLIT = 64
MAX_SPLITS = 64


@dataclass(slots=True, frozen=True)
class LaunchPlan:
    decode: bool          # one query per sequence: program i owns sequence i
    kv_per_program: int   # kv heads one program serves (1 or all)
    num_splits: int       # ranges the keys are cut into (1 = no split-KV, no merge kernel)
    block_m: int          # (query, head) rows per program
    tile_n: int           # key columns per loop iteration
    num_warps: int
    num_stages: int
    heads_fastest: bool = False  # decode grid order: kv-head programs of one sequence adjacent


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@functools.lru_cache(maxsize=256)  # called once per layer per step with the same shapes
def plan_launch(num_tokens: int, num_seqs: int, num_heads: int, num_kv_heads: int,
                max_context: int, num_sms: int) -> LaunchPlan:
    group = num_heads // num_kv_heads
    decode = num_tokens == num_seqs
    if not decode:
        return LaunchPlan(False, 1, 1, max(64, triton.next_power_of_2(group)), 128, 4, 3)

    # One kv head per program, the kv-head programs of a sequence adjacent in the grid (they read the
    # same cache blocks at the same time), and the context split until there are about six programs
    # per SM: one program cannot pull more than a small share of the bandwidth. Below 512 keys the
    # merge launch costs more than the split saves.
    want = 6 * num_sms // (num_seqs * num_kv_heads)
    splits = 1
    if max_context >= 512:
        splits = _pow2_floor(max(1, min(want, max_context // MIN_KEYS_PER_SPLIT, MAX_SPLITS)))
    programs, keys_per_split = num_seqs * num_kv_heads * splits, max_context // splits
    # Many programs, or short splits: 64-position tiles on 2 warps (fewer registers, more programs
    # per SM). Few long programs: 128-position tiles on 4 warps. Very long splits pipeline 2 deep.
    if programs * 2 >= 5 * num_sms or keys_per_split <= 64:
        tile_n, warps = 64, 2
    else:
        tile_n, warps = 128, 4
    stages = 2 if keys_per_split >= 4096 else 4
    return LaunchPlan(True, 1, splits, max(16, triton.next_power_of_2(group)), tile_n, warps, stages, True)
