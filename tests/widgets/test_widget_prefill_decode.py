"""The prefill-vs-decode widget (chapter 11) against the engine and the roofline arithmetic."""
from __future__ import annotations

import itertools

import pytest

pn = pytest.importorskip("panel")

from widgets.common import Cancelled  # noqa: E402
from widgets.modelled.hardware import GPUS, MODELS, decode_step, ridge_batch  # noqa: E402
from widgets.common.testing import LoadedEngine, assert_example_fresh  # noqa: E402
from widgets.prefill_decode.compute import ladder, measure, measure_one, prompt_ids, recorded_latency_rows  # noqa: E402
from widgets.prefill_decode.roofline import BATCHES, RooflinePanel, roofline  # noqa: E402
from widgets.prefill_decode.widget import PrefillDecodeWidget  # noqa: E402

TIMES = {"ttft_ms", "itl_ms", "prefill_ms", "shared"}



def test_saved_example_is_fresh(llm):
    assert_example_fresh("prefill-decode", llm, ignore=TIMES)


def test_each_length_is_prefilled_in_full_and_timed(llm):
    ids = prompt_ids(llm.tokenizer, "Hello there", 40, run=1)
    assert len(ids) == 40 and ids != prompt_ids(llm.tokenizer, "Hello there", 40, run=2)
    points = measure(llm, "Hello there", [24, 48], new_tokens=3)
    assert [p["tokens"] for p in points] == [24, 48]
    for p in points:
        assert p["cached"] == 0                              # a fresh head: the prefix cache cannot help
        assert p["ttft_ms"] >= p["prefill_ms"] > 0 and p["itl_ms"] > 0   # TTFT includes the prefill step


def test_stopping_mid_run_aborts_the_request_and_frees_its_blocks(llm):
    seen = []

    def check():
        seen.append(1)
        if len(seen) >= 2:
            raise Cancelled()
    with pytest.raises(Cancelled):
        measure_one(llm, prompt_ids(llm.tokenizer, "stop me", 32, run=3), new_tokens=50, check=check)
    state = llm.allocator_state()
    assert not state.tables and state.num_free == state.num_blocks


@pytest.mark.parametrize("gpu", list(GPUS))
def test_roofline_ridge_is_peak_over_bandwidth_and_marks_the_turn(gpu):
    g = GPUS[gpu]
    for model in ("SmolLM2-135M", "Llama-3-8B", "Llama-3-70B"):
        d = roofline(model, gpu)
        assert d["ridge_intensity"] == pytest.approx(g.peak_flops / g.bandwidth)
        rb = d["ridge_batch"]
        assert rb == pytest.approx(ridge_batch(MODELS[model], g))
        assert all(p["bound"] == ("memory" if p["batch"] < rb else "compute") for p in d["points"])
        top = max(p["total"] for p in d["points"])
        assert top == pytest.approx(g.peak_flops / decode_step(MODELS[model], g, 1).flops)   # the flat roof
    assert roofline("Llama-3-8B", gpu, context=1000)["ridge_batch"] is None


def test_memory_limit_and_weights_that_do_not_fit():
    d = roofline("Llama-3-8B", "H100 SXM", context=8000)
    n = d["max_batch_in_memory"]
    assert 0 < n < BATCHES[-1] and all(p["fits"] == (p["batch"] <= n) for p in d["points"])
    assert not roofline("Llama-3-70B", "H100 SXM")["weights_fit"] and roofline("Llama-3-70B", "H200")["weights_fit"] is False
    assert roofline("Llama-3-8B", "A100")["weights_fit"]


def test_recorded_latency_rows_take_what_is_there_and_skip_the_rest():
    data = {"results": {"ours": [{"batch": 8, "prompt_tokens": 128, "itl_ms": 3.1, "ttft_ms": 9.0},
                                 {"batch": 1, "prompt_tokens": 2048, "ttft_ms": 20.0},
                                 {"tokens_per_s": 5}],
                        "note": "x"}}
    rows = recorded_latency_rows(data)
    assert rows == [{"batch": 8, "prompt_tokens": 128, "itl_ms": 3.1, "ttft_ms": 9.0},
                    {"batch": 1, "prompt_tokens": 2048, "itl_ms": None, "ttft_ms": 20.0}]
    assert recorded_latency_rows(None) == [] and recorded_latency_rows({"results": {}}) == []


def test_panel_follows_model_gpu_and_batch():
    panel = RooflinePanel()
    first = panel._readout.object
    assert "Batch <span class=\"rf-batch-value\">64</span>" in first and "4.80 ms" in first and "317" in first
    panel.batch.value = 1024
    assert "compute-bound" in panel._readout.object
    panel.model.value = "SmolLM2-135M"
    panel.gpu.value = "A100"
    assert "SmolLM2-135M on A100" in panel._readout.object
    assert panel._src["chosen"].data["batch"] == [1024]
    panel.gpu.value = "H200"                                  # the recorded copy bandwidth is drawn
    assert panel._src["rec_line"].data["x"] and "recorded on NVIDIA H200" in panel._readout.object
    # our engine's own H200 decode steps, from engine/bench/data/latency.json, as stars with their label
    pts = panel._src["rec_pts"].data
    assert pts["batch"] and all("bench latency" in t for t in pts["tip"])
    assert "our engine's decode steps on the H200" in panel._readout.object


def test_panel_says_not_recorded_yet_without_a_latency_file(monkeypatch):
    import engine
    real = engine.load_recorded
    monkeypatch.setattr(engine, "load_recorded", lambda name: None if name == "latency" else real(name))
    panel = RooflinePanel()
    panel.model.value, panel.gpu.value = "SmolLM2-135M", "H200"
    assert not panel._src["rec_pts"].data["batch"]
    assert "not recorded yet" in panel._readout.object        # said, not invented


def test_widget_paints_the_saved_example_then_measures(llm):
    w = PrefillDecodeWidget(LoadedEngine())
    assert w._button.disabled and "recorded on" in w._table.object
    assert w._src["ttft"].data["tokens"] == ladder(512)
    w = PrefillDecodeWidget(LoadedEngine(llm), sentence="<img src=x onerror=alert(1)>")
    assert not w._button.disabled and "Press Measure" in w._table.object   # another sentence: no saved points
    w._longest.value = "256 tokens"
    import widgets.prefill_decode.compute as pd
    lengths = pd.LENGTHS
    pd.LENGTHS = (16, 32)                                     # keep the test short
    try:
        w._measure()
        assert w.jobs.wait_idle(120)
    finally:
        pd.LENGTHS = lengths
    assert w._src["ttft"].data["tokens"] == [16, 32]
    assert "measured on cpu" in w._table.object and "<img" not in w._table.object


def test_latency_legend_sits_above_the_points():
    """ux review ch. 11: the legend box sat on the measured TTFT and ITL points. It is above the plot
    now, two entries to a row (one row of four does not fit 390 px), every entry with its marker."""
    from widgets.prefill_decode.view import latency_figure
    fig, _ = latency_figure(with_recorded=True)
    [legend] = fig.legend
    assert legend in fig.above and legend not in fig.center and legend.ncols == 2
    assert [i.label.value for i in legend.items] == ["TTFT", "ITL (median)", "TTFT, H200 (recorded)",
                                                    "ITL, H200 (recorded)"]


def test_roofline_legend_lists_only_what_is_drawn():
    panel = RooflinePanel()
    seen = set()
    for model, gpu, context in itertools.product(panel.model.options, panel.gpu.options, panel.context.options):
        panel.model.value, panel.gpu.value, panel.context.value = model, gpu, context
        labels = [getattr(i.label, "value", i.label) for i in panel.figure.legend[0].items]
        drawn = bool(panel._src["ridge"].data["x"])
        assert ("ridge" in labels) == drawn, (model, gpu, context)     # no legend entry without its diamond
        seen.add(drawn)
    assert seen == {True, False}                                 # both cases were exercised
