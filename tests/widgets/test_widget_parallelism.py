"""The parallelism widget (chapter 19) without a browser: its saved example is a fresh real run (tp=3 and
pp=3 on CPU processes, the same text as one process), every number it draws is the step trace's or the
arithmetic's, the refusals are the engine's, one run at a time per server, and reader text is escaped."""
from __future__ import annotations

import re
import threading
import time

import pytest

pytest.importorskip("panel")                # the widgets need the app's dependencies (absent on the GPU machine)

from engine import ModelConfig, parallel_layout  # noqa: E402
from widgets.common.testing import assert_example_fresh  # noqa: E402
from widgets.parallelism import view  # noqa: E402
from widgets.parallelism.modelled import SCENARIOS, pipeline, tensor_parallel  # noqa: E402
from widgets.parallelism.compute import check_size, sizes_for  # noqa: E402

SMOL = ModelConfig()
TIMES = {"seconds", "busy", "window_s", "bubble", "startup_s", "device"}     # measured, differ per run


@pytest.fixture(scope="module")
def saved():
    from widgets.common import load_example
    return load_example("parallelism")


def test_saved_example_is_fresh(llm):
    """Recomputed for real: tp=3 and pp=3 processes on this machine, the same text as the saved one."""
    assert_example_fresh("parallelism", llm, ignore=TIMES)


def test_a_run_reports_its_stage_and_progress_while_it_runs(llm):
    """The review sat through 18 s of "Computing…": a run now says which of its three stages runs and
    how far it is (seconds while the processes start, then tokens on the split and on one process)."""
    from widgets.parallelism.compute import run_split
    posted = []
    run = run_split(llm, "Name a colour.", "tp", 3, 3, progress=lambda m: posted.append((time.monotonic(), m)))
    msgs = [m for _t, m in posted]
    stages = [int(re.match(r"Step (\d) of 3 · ", m)[1]) for m in msgs]
    assert stages == sorted(stages) and set(stages) == {1, 2, 3}          # in order, every stage told
    assert msgs[0].startswith("Step 1 of 3 · starting 3 processes (tensor parallel)") and "0 s so far" in msgs[0]
    n = run["tokens"]
    assert f"Step 2 of 3 · generating on 3 processes: {n} of up to 3 tokens" in msgs
    assert any(m.startswith("Step 3 of 3 · the same prompt on one process") and f"{n} of up to 3 tokens" in m
               for m in msgs)
    start = [t for t, m in posted if m.startswith("Step 1")]
    assert run["startup_s"] < 1.5 or len(start) >= 2                    # a long start ticks (once a second)
    assert run["same_text"]


def test_no_developer_placeholder_when_no_multi_gpu_run_is_recorded():
    """Readers saw "not recorded yet — the multi-GPU run (python -m engine bench parallel --device cuda
    --record) will put measured … here". Without a recording they are told what they see instead."""
    html = view.recorded_line(None)
    assert "python -m" not in html and "not recorded yet" not in html and "<code>" not in html
    assert "No multi-GPU measurement is recorded for this page" in html and "modelled" in html


def test_recorded_two_gpu_runs_are_shown_labelled_with_device_link_and_model_shape():
    """Each recorded file (engine/bench/data/parallel*.json) is a table labelled with its device, the
    GPUs' link from nvidia-smi topo, its NCCL version and model shape, and the command that recorded it."""
    from widgets.parallelism.compute import recorded_runs
    runs = recorded_runs()
    if not runs:
        pytest.skip("no two-GPU run recorded")
    html = view.recorded_line(runs)
    assert "No multi-GPU measurement" not in html and "not recorded yet" not in html
    for data in runs:
        shape = data["model"]["shape"]
        assert f"{shape['num_heads']} query / {shape['num_kv_heads']} KV heads" in html
        assert f"NCCL {data['software']['nccl']}" in html and data["command"] in html
        for s in data["results"]["sizes"]:
            if "skipped" not in s:
                eager = s["size"] != "single" and not s["decode_steps_in_cuda_graphs"]
                assert f"<th scope='row'>{s['size']}{'<br><small>no graphs</small>' if eager else ''}</th>" \
                       f"<td>{s['batch']}</td>" in html
    assert "NVLink links" in html or "PCIe" in html


@pytest.mark.parametrize("mode", ["tp", "pp"])
def test_the_split_runs_give_the_single_process_text(saved, mode):
    run = saved.data["runs"][mode]
    assert run["same_text"] and run["text"] == run["single_text"] and run["tokens"] > 3


def test_every_all_reduce_carries_tokens_x_hidden_x_bytes(saved):
    run = saved.data["runs"]["tp"]
    for s in run["steps"]:
        assert s["all_reduce"]["calls"] == 2 * SMOL.num_layers
        assert s["all_reduce"]["bytes"] == s["all_reduce"]["calls"] * s["tokens"] * SMOL.hidden_size * 4
        assert s["all_reduce_bytes_each"] == s["tokens"] * SMOL.hidden_size * 4
        assert all(r["all_reduce"]["bytes"] == s["all_reduce"]["bytes"] for r in s["ranks"])
    html = view.steps_html(run, "measured")
    first = run["steps"][0]
    assert f"= <b>{first['all_reduce_bytes_each']:,} bytes</b>" in html


def test_pipeline_steps_hand_off_the_hidden_state_and_show_the_bubble(saved):
    run = saved.data["runs"]["pp"]
    prefill = run["steps"][0]
    assert prefill["kind"] == "prefill" and len(prefill["micro_batches"]) == 3
    for s in run["steps"]:
        assert s["handoff_bytes"] == [n * SMOL.hidden_size * 4 for n in s["micro_batches"]]
        assert sum(r["send"]["bytes"] for r in s["ranks"]) == 2 * sum(s["handoff_bytes"])    # 2 boundaries
    html = view.steps_html(run, "measured", 0)
    assert html.count('class="pz-lane"') == 3
    assert html.count('class="pz-busy') == 3 * 3                        # 3 stages x 3 micro-batches
    decode = view.steps_html(run, "measured", 1)
    assert decode.count('class="pz-busy') == 3 and "67% at best" in decode


@pytest.mark.parametrize("tp", [3, 9])
def test_the_split_view_draws_each_ranks_slice_of_each_matrix(tp):
    html = view.split_html(parallel_layout(SMOL, tp), SMOL, "tp")
    assert html.count('class="pz-matrix"') == 8
    assert html.count('class="pz-slice') == 8 * tp
    assert html.count("all-reduce: every rank adds") == 2
    for r in range(tp):      # one rank's slices are linked for hovering, and reachable by keyboard
        assert html.count(f'data-link="rank-{r}"') == 8
    assert 'tabindex="0"' in html and "title=" in html


def test_the_stage_view_places_thirty_layers():
    html = view.split_html(parallel_layout(SMOL, 1, 3), SMOL, "pp")
    assert html.count('class="pz-layer ') == 30
    assert [html.count(f'data-link="stage-{s}"') for s in range(3)] == [11, 11, 11]   # 10 layers + legend


def test_refusals_are_the_engines_and_the_servers():
    assert "sizes that work: 1, 3, 9" in check_size(SMOL, "tp", 2)
    assert "the limit is 3" in check_size(SMOL, "tp", 9)
    assert check_size(SMOL, "tp", 3) is None and check_size(SMOL, "pp", 2) is None
    assert "the limit is 3" in check_size(SMOL, "pp", 6)
    assert sizes_for("tp") == [2, 3, 9] and sizes_for("pp") == [2, 3, 5, 6]


def test_reader_text_is_escaped(saved):
    run = dict(saved.data["runs"]["tp"], prompt="<img src=x onerror=alert(1)>", text="<b>x</b>")
    html = view.texts_html(run, "measured")
    assert "<img" not in html and "&lt;img src=x" in html and "<b>x" not in html


def test_one_run_per_server_and_the_next_one_is_told_its_place():
    from widgets.common.sharing import PARALLEL_RUNS, Admission
    assert PARALLEL_RUNS.seats == 1
    slot, waits, got, release = Admission(seats=1), [], [], threading.Event()

    def first():
        with slot.seat():
            got.append("first")
            release.wait(30)

    def second():
        with slot.seat(on_place=waits.append):
            got.append("second")
    t1 = threading.Thread(target=first)
    t1.start()
    deadline = time.monotonic() + 30
    while "first" not in got and time.monotonic() < deadline:
        t1.join(0.05)
    t2 = threading.Thread(target=second)
    t2.start()
    while not waits and time.monotonic() < deadline:
        t2.join(0.05)
    assert waits[:1] == [1] and slot.running == 1 and got == ["first"]
    release.set()
    t1.join(30)
    t2.join(30)
    assert got == ["first", "second"] and slot.running == 0
    from widgets.common.sharing import Refused
    with slot.seat():                                               # a cancelled reader leaves the line
        with pytest.raises(Refused):
            with slot.seat(should_stop=lambda: True):
                pass
        assert slot.waiting == 0 and slot.running == 1


def test_the_modelled_view_is_the_chapters_arithmetic():
    prefill = tensor_parallel("prefill, 2,000 tokens")
    assert prefill["calls"] == 160 and prefill["ring_factor"] == 1.75
    assert prefill["all_reduce_bytes"] == 2000 * 8192 * 2
    assert prefill["links"]["NVLink"]["move_s"] == pytest.approx(0.0204, rel=0.01)
    assert prefill["compute_s"] == pytest.approx(0.0351, rel=0.01)
    assert prefill["links"]["PCIe"]["move_s"] / prefill["links"]["NVLink"]["move_s"] == pytest.approx(450 / 64)
    assert tensor_parallel("decode, 1 user")["links"]["NVLink"]["fixed_s"] == pytest.approx(160 * 10e-6)
    pp = pipeline("decode, 1 user")
    assert pp["hidden_bytes"] == 16 * 1024 and pp["vllm_bytes"] == 32 * 1024
    html = view.modelled_html(prefill, pipeline("prefill, 2,000 tokens"), "")
    assert "modelled" in html and re.search(r"<b>\d+%</b>", html)
    assert set(SCENARIOS) == {"decode, 1 user", "decode, 64 users", "prefill, 2,000 tokens"}
