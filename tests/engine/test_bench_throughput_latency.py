"""`bench throughput` and `bench latency` run end to end on the CPU (tiny model, Hugging Face peers
included) and print the JSON the chapters read; nothing here is timed, only the shape is checked."""
from __future__ import annotations

import json

import pytest

from engine import cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_cli(capsys, *args) -> dict:
    assert cli.main(["bench", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def throughput_report(one_torch_thread):
    from engine.bench import throughput
    return throughput.run(["--small", "--num-requests", "3", "--output-len", "3", "--hf-num-requests", "2"])


@pytest.fixture(scope="module")
def latency_report(one_torch_thread):
    from engine.bench import latency
    return latency.run(["--small", "--batches", "1,2", "--prompts", "8", "--new-tokens", "3", "--reps", "1",
                        "--hf-compile-shapes", "1x8"])


def test_throughput_small_prints_every_system_ratio_and_the_roofline(throughput_report):
    report = throughput_report
    assert report["benchmark"] == "throughput" and report["device"].startswith("cpu")
    assert report["model"]["name"] == "tiny-random" and report["model"]["shape"]["num_layers"] == 4
    r = report["results"]
    assert r["workload"]["num_requests"] == 3 and r["workload"]["hf_num_requests"] == 2
    systems = r["systems"]
    peers = {"hf_generate_batch", "hf_generate_batch_cuda_graphs", "hf_generate_static_64"}
    assert set(systems) == {"ours", "ours_subset_eager", "ours_subset"} | peers | {p + "_full" for p in peers}
    assert systems["ours"]["output_tokens"] == 9 and systems["ours_subset"]["output_tokens"] == 6
    for name, s in systems.items():
        assert "error" in s or (s["output_tokens_per_s"] > 0 and s["requests"] == (3 if name in (
            "ours",) or name.endswith("_full") else 2)), (name, s)
    assert systems["hf_generate_static_64"]["output_tokens"] == 6        # EOS never stops a peer early
    assert systems["hf_generate_static_64_full"]["output_tokens"] == 9
    assert set(systems["ours"]["mean_decode_step_ms"]) >= {"schedule", "prepare_inputs", "forward", "sample",
                                                            "update_outputs", "gpu_forward"}
    assert r["roofline"]["figure"] == "computed"
    assert r["roofline"]["output_tokens_per_s"] > 0 and r["roofline"]["total_bytes"] > 0
    assert r["could_flatter_us"] and all(isinstance(c, str) for c in r["could_flatter_us"])
    assert "goals" not in r["ratios"]                    # issue 23's goals are set on SmolLM2's shapes only


def test_like_for_like_divides_only_figures_taken_on_the_same_requests(throughput_report):
    r = throughput_report["results"]
    systems, like = r["systems"], r["like_for_like"]
    assert set(like) == {"requests_3", "requests_2"}
    for size, ours, suffix in ((3, "ours", "_full"), (2, "ours_subset", "")):
        row = like[f"requests_{size}"]
        assert row["ours"] == systems[ours]["output_tokens_per_s"]
        for peer, ratio in row["ours_over"].items():
            theirs = systems[peer + suffix]
            assert theirs["requests"] == systems[ours]["requests"] == size
            assert ratio == round(row["ours"] / theirs["output_tokens_per_s"], 2)


def test_latency_small_prints_rows_the_widgets_read(latency_report):
    r = latency_report["results"]
    assert [(row["batch"], row["prompt_tokens"]) for row in r["rows"]] == [(1, 8), (2, 8)]
    for row in r["rows"]:
        assert row["itl_ms"] > 0 and row["ttft_ms"] > 0 and row["decode_tokens_per_s"] > 0
        assert "itl_ms" in row["hf_eager"] or "error" in row["hf_eager"]
        # the data-flow widget's reader: rows with an integer batch and a field named itl_*_ms
        assert isinstance(row["batch"], int) and next(k for k in row if k.startswith("itl")) == "itl_ms"
    assert "itl_ms" in r["rows"][0]["hf_static_compile"] or "error" in r["rows"][0]["hf_static_compile"]
    assert r["rows"][1]["hf_static_compile"] == {"skipped": "not in --hf-compile-shapes"}
    assert r["kv_cache_speedup"]["context_tokens"] == 8 and r["kv_cache_speedup"]["speedup"] > 0
    assert r["kv_cache_speedup"]["figure"] == "computed"
    for row in r["rows"]:
        assert row["computed"]["figure"] == "computed" and row["computed"]["step_floor_ms"] > 0


def test_latency_figures_are_medians_of_the_runs_on_both_sides(one_torch_thread):
    from engine.bench import latency
    r = latency.run(["--small", "--batches", "1", "--prompts", "8", "--new-tokens", "3", "--reps", "3",
                     "--hf-compile-shapes", "none"])["results"]
    row = r["rows"][0]
    assert r["workload"]["reps"] == 3 and row["hf_static_compile"] == {"skipped": "not in --hf-compile-shapes"}
    for figures in (row, row["hf_eager"]):
        for key in ("ttft_ms", "itl_ms"):
            assert len(figures["runs"][key]) == 3
            assert figures[key] == round(sorted(figures["runs"][key])[1], 3)


def test_the_chapter_11_12_and_data_flow_widgets_read_the_latency_rows(latency_report):
    """widgets/prefill_decode/compute.recorded_latency_rows (chapters 11, 12) and the data-flow widget's
    step reader find every row of what `bench latency --record` writes, with the same numbers."""
    pytest.importorskip("panel")
    from widgets.data_flow.recorded import _step_rows
    from widgets.prefill_decode.compute import recorded_latency_rows

    rows = latency_report["results"]["rows"]
    read = recorded_latency_rows(latency_report)
    assert [(r["batch"], r["prompt_tokens"], r["itl_ms"], r["ttft_ms"]) for r in read] == \
        [(r["batch"], r["prompt_tokens"], r["itl_ms"], r["ttft_ms"]) for r in rows]
    steps = sorted(_step_rows(latency_report["results"]))
    assert steps == sorted((r["batch"], r["itl_ms"], f"prompt_tokens {r['prompt_tokens']}") for r in rows)


def test_record_writes_the_data_file_with_its_command(tmp_path, monkeypatch, capsys):
    from engine.bench import recorded
    monkeypatch.setattr(recorded, "DATA_DIR", tmp_path)
    run_cli(capsys, "latency", "--small", "--batches", "1", "--prompts", "8", "--new-tokens", "2", "--reps", "1",
            "--skip-hf", "--record")
    saved = json.loads((tmp_path / "latency.json").read_text())
    assert saved["command"].startswith("python -m engine bench latency --small") and "--record" not in saved["command"]
    assert saved["results"]["rows"][0]["batch"] == 1 and saved["software"]["torch"]
    assert saved["model"]["name"] == "tiny-random" and saved["model"]["shape"]["hidden_size"] == 128
    assert {"name", "device", "date", "commit", "command", "model"} <= set(saved)


def test_every_figure_the_chapters_name_exists_in_the_benchmarks_output(throughput_report, latency_report):
    """The chapters' {recorded:...} paths resolve in what the benchmarks print (here: their CPU smoke runs,
    with the chapters' batch and prompt sizes swapped for the small ones), so a GPU run with --record fills
    every figure in."""
    from app.content import list_chapters
    from app.recorded_figures import FIGURE_RE, lookup

    reports = {"throughput": throughput_report["results"], "latency": latency_report["results"]}
    small = {"prompt_tokens=128": "prompt_tokens=8", "prompt_tokens=2048": "prompt_tokens=8",
             "batch=8": "batch=2", "batch=64": "batch=2"}
    named = [(c.slug, m) for c in list_chapters(strict=True) for m in FIGURE_RE.finditer(c.body)]
    assert named
    for slug, m in named:
        path = m["path"]
        for big, little in small.items():
            path = path.replace(big, little)
        if m["name"] not in reports:
            continue
        if ".gpu_" in path:                           # GPU times are None on the CPU: the key must exist
            parent, key = path.rsplit(".", 1)
            assert key in lookup_node(reports[m["name"]], parent)
        else:
            lookup(reports[m["name"]], path)          # raises MissingFigure if the path is wrong


def lookup_node(results, path):
    node = results
    for part in path.split("."):
        node = node[part]
    return node
