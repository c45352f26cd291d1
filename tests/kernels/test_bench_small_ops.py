"""The small-ops micro-benchmark's JSON: every op at every token count, and a per-step sum that adds up.

Shapes only, never speeds (no timed tests); on CPU only the reference is timed.
"""

from __future__ import annotations

import json

import pytest
import torch

from kernels.bench import small_ops as bench_small_ops


def test_bench_prints_every_op_at_every_token_count_and_a_consistent_step_sum(capsys, one_torch_thread):
    if torch.cuda.is_available():
        pytest.skip("on a GPU the benchmark is the lead's to run (see the module docstring)")
    assert bench_small_ops.main(["--tokens", "1,3", "--calls", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "small_ops" and out["dtype"] == "float32"
    rows = {(r["op"], r["tokens"]): r for r in out["results"]}
    assert set(rows) == {(op, t) for op in bench_small_ops.STEP_CALLS for t in (1, 3)}
    assert all(r["reference"]["eager_us"] > 0 and "triton" not in r for r in rows.values())
    for t in (1, 3):
        want = sum(rows[op, t]["reference"]["eager_us"] * n for op, n in bench_small_ops.STEP_CALLS.items())
        assert out["per_decode_step"]["by_tokens"][str(t)]["reference"]["eager_us"] == pytest.approx(want, abs=0.1)
