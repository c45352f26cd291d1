"""The memory ladder beyond the published figures (widgets/common/memory_ladder.py): derived and estimated
on-chip bandwidths, the server around the GPU, and splitting a model over GPUs."""
from __future__ import annotations

import pytest

pytest.importorskip("panel")           # widgets/common/__init__ loads the toolkit, which needs Panel

from widgets.modelled.hardware import GPUS, MODELS, num_parameters, weight_bytes  # noqa: E402
from widgets.modelled.memory_ladder import (BOOST_CLOCK_HZ, gpus_needed, l2_bandwidth, nvlink_each_way,
                                          register_bandwidth, ring_allreduce_bytes, smem_bandwidth, sram_total,
                                          transfer_s)


@pytest.mark.parametrize("name", list(GPUS))
def test_the_ladder_is_ordered_and_hbm_is_its_slowest_on_gpu_rung(name):
    gpu = GPUS[name]
    assert gpu.name in BOOST_CLOCK_HZ
    assert gpu.bandwidth < l2_bandwidth(gpu) < smem_bandwidth(gpu) < register_bandwidth(gpu)
    assert gpu.pcie < nvlink_each_way(gpu) < gpu.bandwidth


def test_derived_figures_for_the_h100():
    h100 = GPUS["H100 SXM"]
    assert smem_bandwidth(h100) == pytest.approx(33.45e12, rel=1e-3)   # 32 × 4 B × 132 SMs × 1.98 GHz
    assert nvlink_each_way(h100) == 450e9
    # chapter 13: registers 33 MiB + shared memory 29.4 MiB + L2 50 MiB ≈ 112 MiB (118 MB), ~140× less than
    # Llama-3-8B (the L2 in binary units, as the device reports it: 52,428,800 bytes)
    assert sram_total(h100) == pytest.approx(117.8e6, rel=1e-3)
    assert round(weight_bytes(MODELS["Llama-3-8B"]) / sram_total(h100), -1) == 140


def test_smollm2_is_the_engines_model(llm):
    """The chapters' SmolLM2 is the loaded model: same shapes, same parameter count as its tensors."""
    for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
              "vocab_size", "tie_word_embeddings"):
        assert getattr(MODELS["SmolLM2-135M"], f) == getattr(llm.config, f), f
    assert num_parameters(MODELS["SmolLM2-135M"]) == sum(p.numel() for p in llm.model.parameters())


def test_fitting_and_collectives():
    h100 = GPUS["H100 SXM"]
    assert gpus_needed(weight_bytes(MODELS["Llama-3-8B"]), h100) == 1
    assert gpus_needed(weight_bytes(MODELS["Llama-3-70B"]), h100) == 2
    assert gpus_needed(10 * h100.memory_bytes, h100) is None
    assert ring_allreduce_bytes(1000, 1) == 0 and ring_allreduce_bytes(1000, 4) == 1500
    assert transfer_s(3.35e12, h100.bandwidth) == 1.0
    with pytest.raises(ValueError):
        transfer_s(1, 0)
