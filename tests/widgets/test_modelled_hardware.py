"""The modelled hardware arithmetic (widgets/modelled/hardware.py): the roofline's corner, the decode step,
KV bytes and the memory budget, checked against their definitions and the engine's own formula."""
from __future__ import annotations

import math

import pytest

from widgets.modelled.hardware import (GPUS, MODELS, decode_step, kv_bytes, kv_bytes_per_token, kv_cache_budget,
                                     max_cached_tokens, num_parameters, ridge_batch, ridge_intensity,
                                     weight_bytes)


@pytest.mark.parametrize("name", list(GPUS))
def test_the_ridge_is_peak_flops_over_bandwidth(name):
    gpu = GPUS[name]
    assert ridge_intensity(gpu) == pytest.approx(gpu.peak_flops / gpu.bandwidth)
    for cfg in MODELS.values():
        b = ridge_batch(cfg, gpu)
        step = decode_step(cfg, gpu, b)             # the corner: both limits take the same time ...
        assert step.compute_s == pytest.approx(step.memory_s, rel=1e-9)
        assert step.intensity == pytest.approx(ridge_intensity(gpu), rel=1e-9)   # ... at the ridge's intensity
        below, above = decode_step(cfg, gpu, math.floor(b)), decode_step(cfg, gpu, math.ceil(b) + 1)
        assert below.bound == "memory" and above.bound == "compute"


def test_published_figures_the_chapters_quote():
    h100, a100 = GPUS["H100 SXM"], GPUS["A100"]
    assert round(ridge_intensity(h100)) == 295 and round(ridge_intensity(a100)) == 156
    llama8 = MODELS["Llama-3-8B"]
    assert num_parameters(llama8) == 8_030_261_248                      # Meta-Llama-3-8B's parameter count
    assert num_parameters(MODELS["SmolLM2-135M"]) == 134_515_008
    one = decode_step(llama8, h100, 1)
    assert one.time_s * 1e3 == pytest.approx(4.79, abs=0.01) and one.bound == "memory"
    assert round(one.tokens_per_s) == 209


def test_kv_bytes_follow_the_engines_formula():
    for cfg in MODELS.values():
        per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2
        assert kv_bytes_per_token(cfg) == per_token == cfg.kv_bytes_per_token(2)
        assert kv_bytes(cfg, 1000) == 1000 * per_token
    assert kv_bytes(MODELS["Llama-3.1-70B"], 131_072) == 40 * 2**30    # chapter 12's 40 GiB at 128K
    assert MODELS["Llama-3-70B"].max_position_embeddings == 8192
    assert MODELS["Llama-3.1-70B"].max_position_embeddings == 131_072


def test_the_decode_step_adds_weights_once_and_cache_per_request():
    cfg, gpu = MODELS["Llama-3-8B"], GPUS["H200"]
    a, b = decode_step(cfg, gpu, 1, 1000), decode_step(cfg, gpu, 2, 1000)
    assert a.weight_bytes == b.weight_bytes == weight_bytes(cfg)
    assert b.kv_read_bytes == 2 * a.kv_read_bytes == 2 * 1000 * kv_bytes_per_token(cfg)
    assert b.bytes - a.bytes == pytest.approx(1001 * kv_bytes_per_token(cfg))
    assert ridge_batch(cfg, GPUS["H100 SXM"], context=1000) is None      # own cache reads keep it memory-bound


def test_the_kv_budget_is_one_rule_for_every_gpu():
    cfg, h100 = MODELS["Llama-3-8B"], GPUS["H100 SXM"]
    assert kv_cache_budget(cfg, h100) == pytest.approx(0.9 * 80e9 - weight_bytes(cfg))
    assert max_cached_tokens(cfg, h100) * kv_bytes_per_token(cfg) <= kv_cache_budget(cfg, h100)
    assert max_cached_tokens(MODELS["Llama-3-70B"], h100) == 0          # 141 GB of weights do not fit in 80
