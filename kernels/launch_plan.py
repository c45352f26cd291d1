"""How the Triton paged-attention kernel is launched for a given batch: tile sizes, layout, splits.

Pure Python, decided from shapes alone (no device sync). The numbers come from `python -m kernels.tune`
on an H200 (bf16, SmolLM2 shapes, block size 16); see kernels/NOTES.md for the measurements.

Decode reads every K/V byte once, so the plan is about keeping enough loads in flight:
- large batches: one program reads *all* kv heads of its sequence (each cache block is then one
  contiguous run) with big tiles, about two programs per SM;
- small batches: one kv head per program, and the context split across programs (split-KV) until there
  are about four programs per SM, but never fewer than 256 keys per split.
Prefill and mixed batches pack 64 (query, head) rows per program so the matrix units see real tiles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import triton

MIN_KEYS_PER_SPLIT = 256
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


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@functools.lru_cache(maxsize=256)  # called once per layer per step with the same shapes
def plan_launch(num_tokens: int, num_seqs: int, num_heads: int, num_kv_heads: int,
                max_context: int, num_sms: int) -> LaunchPlan:
    group = num_heads // num_kv_heads
    decode = num_tokens == num_seqs
    if not decode:
        return LaunchPlan(False, 1, 1, max(64, triton.next_power_of_2(group)), 128, 4, 3)

    # All kv heads in one program pays off once there are enough sequences to fill the GPU anyway;
    # it costs num_kv_heads x the score arithmetic (masked columns), so only for few kv heads.
    if num_kv_heads <= 4 and num_seqs * num_kv_heads >= 2 * num_sms:
        splits = min(max(1, 2 * num_sms // num_seqs), max(1, max_context // 1024))
        rows = triton.next_power_of_2(num_heads)
        return LaunchPlan(True, num_kv_heads, _pow2_floor(splits), max(16, rows), 256, 4, 3)

    want = triton.cdiv(4 * num_sms, num_seqs * num_kv_heads)
    splits = min(want, max(1, max_context // MIN_KEYS_PER_SPLIT), MAX_SPLITS)
    return LaunchPlan(True, 1, _pow2_floor(splits), max(16, triton.next_power_of_2(group)), 128, 4, 3)
