"""`bench prefill` runs end to end on the CPU (tiny model) and prints the JSON a recorded file holds;
nothing here is timed, only the shape and the arithmetic of the computed floors are checked."""
from __future__ import annotations

import json
import re

import pytest

from engine import cli
from engine.bench import prefill
from engine.bench.bench_env import recorded_name
from engine.config import RANDOM_SHAPES, ModelConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def report(one_torch_thread):
    return prefill.run(["--small", "--lengths", "8,16", "--reps", "3"])


def test_prefill_small_prints_one_row_per_length_with_its_computed_floors(report):
    assert report["benchmark"] == "prefill" and report["device"].startswith("cpu")
    assert report["model"]["name"] == "tiny-random" and report["model"]["parameters"] > 0
    r = report["results"]
    assert r["workload"]["prompt_tokens"] == [8, 16] and r["workload"]["reps"] == 3
    assert r["ceilings"]["figure"] == "measured" and r["ceilings"]["matmul_tflops"] > 0
    assert [row["prompt_tokens"] for row in r["rows"]] == [8, 16]
    for row in r["rows"]:
        assert row["ttft_ms"] > 0 and len(row["runs"]["ttft_ms"]) == 3
        assert row["ttft_ms"] == round(sorted(row["runs"]["ttft_ms"])[1], 3)
        c = row["computed"]
        assert c["figure"] == "computed" and c["floor_ms"] == max(c["compute_floor_ms"], c["bytes_floor_ms"])
        assert c["flops"] == prefill.prefill_flops(prefill_cfg(report), row["prompt_tokens"])


def prefill_cfg(report) -> ModelConfig:
    s = report["model"]["shape"]
    return ModelConfig(num_layers=s["num_layers"], hidden_size=s["hidden_size"], num_heads=s["num_heads"],
                       num_kv_heads=s["num_kv_heads"], head_dim=s["head_dim"],
                       intermediate_size=s["intermediate_size"], vocab_size=s["vocab_size"])


def test_prefill_flops_count_the_weights_the_causal_attention_and_one_lm_head_row():
    cfg = RANDOM_SHAPES["llama-3-8b-random"]
    n = 2048
    weights = 2 * 6_979_321_856 * n                          # 8.03 B parameters less the embedding and head
    attention = 4 * 32 * 32 * 128 * n * (n + 1) // 2
    assert prefill.prefill_flops(cfg, n) == weights + attention + 2 * 4096 * 128256


def test_a_prompt_the_context_cannot_hold_is_measured_at_the_longest_that_fits():
    assert prefill.prompt_lengths([128, 8192, 16384, 128], 8192) == [128, 8191]
    assert prefill.prompt_lengths([16384], 131072) == [16384]


def test_a_model_other_than_smollm2_records_under_its_own_name(tmp_path, monkeypatch, capsys):
    assert recorded_name("latency", {"name": "SmolLM2-135M-Instruct"}) == "latency"
    assert recorded_name("latency", {"name": "Llama-3-8B"}) == "latency-llama-3-8b"
    assert recorded_name("prefill", {"name": "Llama-3.2-1B"}) == "prefill-llama-3_2-1b"
    for shape in RANDOM_SHAPES.values():         # a chapter's {recorded:NAME:...} can name each of them
        assert re.fullmatch(r"[a-z0-9_-]+", recorded_name("throughput", {"name": shape.name}))
    from engine.bench import recorded
    monkeypatch.setattr(recorded, "DATA_DIR", tmp_path)
    assert cli.main(["bench", "prefill", "--small", "--lengths", "8", "--reps", "1", "--record"]) == 0
    saved = json.loads((tmp_path / "prefill.json").read_text())     # the tiny model keeps the bare name
    assert saved["command"] == "python -m engine bench prefill --small --lengths 8 --reps 1"
    assert saved["model"]["shape"]["num_layers"] == 4 and saved["results"]["rows"][0]["prompt_tokens"] == 8
