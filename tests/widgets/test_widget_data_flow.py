"""The data-flow widget (chapter 13): its per-level times are its bytes ÷ bandwidth, its byte totals are
the model arithmetic, the recorded figures come from the recorded files, and the saved example is fresh."""
from __future__ import annotations

import itertools
import math

import pytest

pytest.importorskip("panel")           # the GPU machine has no Panel (pytest -m gpu must still collect)

from widgets.modelled.hardware import GPUS, MODELS, kv_bytes, num_parameters, weight_bytes
from widgets.modelled.memory_ladder import (gpus_needed, l2_bandwidth, nvlink_each_way, register_bandwidth,
                                          smem_bandwidth)
from widgets.common.testing import LoadedEngine, assert_example_fresh
from widgets.data_flow import recorded as rec
from widgets.data_flow.compute import KINDS, decode_step_flow
from widgets.data_flow.diagram import fmt_bytes, fmt_time
from widgets.data_flow.view import render
from widgets.data_flow.widget import BATCHES, CONTEXTS, WIDGET_MODELS, DataFlowWidget, bench

CHOICES = list(itertools.product(WIDGET_MODELS, ["H100 SXM", "H200"], [1, 8, 64, 256], [128, 2048, 8192]))


@pytest.mark.parametrize("model,gpu,batch,context", CHOICES)
def test_each_level_time_is_its_bytes_over_its_bandwidth(model, gpu, batch, context):
    flow = decode_step_flow(MODELS[model], GPUS[gpu], batch, context)
    shown = render(MODELS, model, gpu, batch, context, with_recorded=False)["diagram"]["levels"]
    for level, drawn in zip(flow.levels, shown):
        assert drawn["key"] == level.key
        for kind in KINDS:
            assert level.time_s(kind) == level.bytes[kind] / level.bandwidth
            assert drawn["times"][kind] == pytest.approx(drawn["bytes"][kind] / level.bandwidth, rel=1e-12)
        total = sum(level.bytes.values())
        assert drawn["time_s"] == pytest.approx(total / level.bandwidth, rel=1e-12)
        assert drawn["label"] == f"{fmt_bytes(total)} in {fmt_time(total / level.bandwidth)}"
    bandwidths = {lv.key: lv.bandwidth for lv in flow.levels}
    g = GPUS[gpu]
    assert bandwidths == {"hbm": g.bandwidth, "l2": l2_bandwidth(g), "smem": smem_bandwidth(g),
                          "registers": register_bandwidth(g)}


@pytest.mark.parametrize("model,gpu,batch,context", CHOICES)
def test_byte_totals_are_the_model_arithmetic(model, gpu, batch, context):
    m, flow = MODELS[model], decode_step_flow(MODELS[model], GPUS[gpu], batch, context)
    n = flow.gpus or 8
    assert n == (gpus_needed(weight_bytes(m) + kv_bytes(m, context * batch), GPUS[gpu]) or 8)
    per_token = m.kv_bytes_per_token()
    assert flow.traffic["weights"] == num_parameters(m) * 2 / n
    assert flow.traffic["kv_read"] == per_token * context * batch / n
    assert flow.traffic["kv_write"] == per_token * batch / n
    hbm = flow.level("hbm")
    for kind in ("weights", "kv_read", "kv_write"):           # every HBM byte also crosses L2, SMEM, registers
        assert {lv.bytes[kind] for lv in flow.levels} == {flow.traffic[kind]}
    logits, acts = 2 * batch * m.vocab_size * 4, flow.traffic["activations"]
    assert hbm.bytes["activations"] in (0.0, logits, acts - logits, acts)
    assert flow.resident_bytes == pytest.approx((weight_bytes(m) + kv_bytes(m, context * batch)) / n)


def test_one_gpu_reads_every_parameter_once():
    flow = decode_step_flow(MODELS["Llama-3-8B"], GPUS["H100 SXM"], 1, 1024)
    assert flow.gpus == 1
    assert flow.traffic["weights"] == 8_030_261_248 * 2
    assert flow.level("hbm").time_s("weights") == pytest.approx(4.79e-3, rel=1e-2)   # chapter 11's 4.8 ms
    assert flow.side[0].step_bytes == 0 and flow.allreduce_time_s == 0


def test_hbm_is_the_slowest_rung_and_sets_the_pace_until_the_ridge():
    for model, gpu, batch, context in CHOICES:
        flow = decode_step_flow(MODELS[model], GPUS[gpu], batch, context)
        hbm = flow.level("hbm")
        assert flow.bottleneck() is hbm
        assert flow.step_time_s() == max(hbm.time_s(), flow.flops_time_s) + flow.allreduce_time_s
        out = render(MODELS, model, gpu, batch, context, with_recorded=False)
        assert out["diagram"]["pace"] == ("arithmetic" if flow.flops_time_s > hbm.time_s() else "hbm")
        if batch <= 64:                                   # far left of every GPU's ridge point (≥ 150)
            assert not flow.compute_bound() and "HBM sets the pace" in out["summary"]
    big = decode_step_flow(MODELS["Llama-3-70B"], GPUS["H200"], 256, 128)
    assert big.compute_bound()          # batch 256 > the H200's ridge of 206 FLOPs per byte


def test_a_model_too_big_for_one_gpu_is_split_and_uses_nvlink():
    flow = decode_step_flow(MODELS["Llama-3-70B"], GPUS["H100 SXM"], 1, 128)
    assert flow.gpus == 2                                     # 141 GB of weights > 80 GB
    nvlink = flow.side[0]
    assert nvlink.key == "nvlink" and nvlink.step_bytes > 0
    assert flow.allreduce_time_s == nvlink.step_bytes / nvlink_each_way(GPUS["H100 SXM"])
    out = render(MODELS, "Llama-3-70B", "H100 SXM", 1, 128, with_recorded=False)
    assert "split over 2 GPUs" in out["diagram"]["caption"] and "split over 2 GPUs" in out["summary"]


def test_activations_stay_in_l2_until_one_tensor_outgrows_half_of_it():
    small = decode_step_flow(MODELS["Llama-3-8B"], GPUS["H100 SXM"], 8, 2048)
    assert small.level("hbm").bytes["activations"] == 0 and small.level("l2").bytes["activations"] > 0
    big = decode_step_flow(MODELS["Llama-3-8B"], GPUS["H100 SXM"], 256, 128)
    logits = 2 * 256 * 128_256 * 4                 # 131 MB of fp32 logits, written and read: past half of L2
    assert big.level("hbm").bytes["activations"] == logits     # the layers' tensors (≤ 7.3 MB) stay in L2


def test_side_links_price_the_chapters_moves():
    flow = decode_step_flow(MODELS["Llama-3-8B"], GPUS["H100 SXM"], 8, 8192)
    pcie = next(s for s in flow.side if s.key == "pcie")
    what, nbytes, seconds = pcie.whatif[0]
    assert "swap" in what and nbytes == 2 ** 30                # chapter 12: 8,192 tokens × 128 KiB = 1 GiB
    assert seconds == nbytes / 64e9
    nic = next(s for s in flow.side if s.key == "nic")
    assert nic.bandwidth == 50e9 and nic.step_bytes == 0       # 400 Gb/s card: 50 GB/s


def test_recorded_figures_come_from_the_recorded_file():
    from engine import load_recorded
    kernels = load_recorded("kernels")
    figs = {f.key: f for f in rec.beside(8, 2048, GPUS["H200"].bandwidth)}
    assert figs["copy"].value == f"{kernels['results']['copy_bandwidth_gb_s']:,.0f} GB/s"
    assert "NVIDIA H200" in figs["copy"].label and kernels["command"] in figs["copy"].label
    row = next(r for r in kernels["results"]["decode"] if (r["batch"], r["context"]) == (8, 1024))
    assert rec.nearest(kernels["results"]["decode"], 8, 2048) in (row, next(
        r for r in kernels["results"]["decode"] if (r["batch"], r["context"]) == (8, 4096)))
    exact = rec.attention_figure(64, 4096, GPUS["H200"].bandwidth)
    assert exact.value.startswith("62.0 µs, 3,252 GB/s") and "at this batch and context" in exact.detail


def test_a_missing_recorded_file_is_said_plainly_to_the_reader(monkeypatch):
    """No GPU figure is invented, and no developer's placeholder ("not recorded yet — python -m … will
    record it") reaches the page: the reader is told no measurement shipped and the rest is modelled."""
    monkeypatch.setattr(rec, "load_recorded", lambda name: None)
    figs = rec.beside(8, 2048, GPUS["H200"].bandwidth)
    assert all(f.value == rec.MISSING and f.label is None for f in figs)
    html = render(MODELS, "Llama-3-8B", "H100 SXM", 8, 2048)["beside"]
    assert html.count("no GPU measurement ships with this page") == 3
    assert "not recorded yet" not in html and "python -m" not in html


def test_a_recorded_decode_step_is_shown_with_its_label(monkeypatch):
    latency = {"name": "latency", "device": "NVIDIA H200", "date": "2026-12-01", "commit": "abc",
               "command": "python -m engine bench latency",
               "results": {"ours": [{"batch": 1, "prompt_tokens": 128, "itl_ms": 2.5, "ttft_ms": 9.0},
                                    {"batch": 8, "prompt_tokens": 128, "itl_ms": 2.9, "ttft_ms": 11.0}]}}
    real = rec.load_recorded
    monkeypatch.setattr(rec, "load_recorded", lambda name: latency if name == "latency" else real(name))
    step = rec.step_figure(8)
    assert step.value == "2.90 ms (prompt_tokens 128)" and "bench latency" in step.label
    assert rec.step_figure(2).detail.endswith("nearest yours")


def test_saved_example_is_fresh(llm):
    assert_example_fresh("data-flow", llm)


def test_widget_follows_its_controls_and_clamps_its_arguments():
    w = DataFlowWidget(LoadedEngine(), batch=1000, context=5, model="GPT-9")   # no model: its gate just waits
    assert w._batch.value == BATCHES[-1] and w._context.value == CONTEXTS[0]
    assert "No model called" in w.notes.object and "Batch is 1–256" in w.notes.object
    w._model.value, w._batch.value, w._context.value = "Llama-3-70B", 16, 4096
    caption = w.diagram.data["caption"]
    assert "Llama-3-70B, batch 16, context 4,096" in caption and "split over 4 GPUs" in caption
    w._gpu.value = "H200"
    assert "on an H200" in w.diagram.data["caption"]
    flow = decode_step_flow(MODELS["Llama-3-70B"], GPUS["H200"], 16, 4096)
    assert w.diagram.data["levels"][-1]["time_s"] == pytest.approx(flow.level("hbm").time_s())


def test_the_status_line_says_modelled_not_live(llm):
    """Every time this widget shows is arithmetic: its status must not say "Live" (ux review, ch. 13)."""
    w = DataFlowWidget(LoadedEngine(llm))
    assert w.gate.live and 'data-state="live"' in w.gate.pane.object     # browser tests still wait on "live"
    assert "Modelled:" in w.gate.pane.object and "Live" not in w.gate.pane.object
    assert "bytes ÷ the GPU" in w.gate.pane.object


def test_bench_reports_milliseconds(llm):
    out = bench(llm)
    assert set(out) == {"data-flow update ms"} and math.isfinite(out["data-flow update ms"])
