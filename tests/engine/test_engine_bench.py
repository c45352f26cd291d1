"""`python -m engine bench serve-sim` runs end to end and shows continuous batching ahead of static."""
from __future__ import annotations

import json

import torch

from engine.bench import serve_sim


def test_serve_sim_small_mixed_workload(capsys):
    threads = torch.get_num_threads()
    try:
        report = serve_sim.run(["--small", "--num-requests", "9", "--scale", "0.04", "--max-num-seqs", "4"])
    finally:
        torch.set_num_threads(threads)
    printed = json.loads(capsys.readouterr().out)
    assert printed["results"].keys() == {"continuous", "static"} == report["results"].keys()
    c, s = report["results"]["continuous"], report["results"]["static"]
    assert report["weights"] == "random" and report["measured_on"].startswith(("cpu", "cuda"))
    assert report["workload"]["by_pattern"] == {"summarization": 3, "chatbot": 3, "codegen": 3}
    # the same work in fewer steps: finished requests leave and waiting ones take their seats at once
    assert c["steps"] < s["steps"] and c["padding_decodes"] == 0 < s["padding_decodes"]
    assert c["mean_batch_size"] > s["mean_batch_size"] - s["padding_decodes"] / s["steps"]
    assert c["prefix_cache_hit_rate"] > 0          # the chatbot requests share a system prompt
    assert c["all_blocks_free_at_end"] and s["all_blocks_free_at_end"]


def test_cli_entry_point_prints_json_and_exits_zero(capsys):
    threads = torch.get_num_threads()
    try:
        assert serve_sim.main(["--small", "--num-requests", "3", "--scale", "0.02", "--mode", "continuous"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert json.loads(capsys.readouterr().out)["results"].keys() == {"continuous"}


def test_spec_bench_small_prints_json_with_every_proposer(capsys):
    from engine.bench import spec
    threads = torch.get_num_threads()
    try:
        report = spec.run(["--small", "--max-tokens", "10", "--kinds", "repetition,prose", "--k", "3",
                           "--oracle", "1.0,0.5", "--oracle-k", "3", "--draft-model", "self", "--batch", "1,2",
                           "--repeat", "3", "--cost-batches", "1,2", "--cost-context", "40"])
    finally:
        torch.set_num_threads(threads)
    assert json.loads(capsys.readouterr().out) == report
    assert report["weights"] == "random" and report["measured_on"].startswith(("cpu", "cuda"))
    assert report["shape"]["layers"] == report["shape"]["layers"] > 0 and report["rule"]["min_acceptance"] is not None
    assert set(report["results"]) == {"b=1", "b=2"}
    rows = report["results"]["b=1"]["repetition"]
    assert set(rows) == {"plain", "ngram k=3", "early_exit L=1 k=3", "draft_model=self k=3",
                         "oracle a=1.0 k=3", "oracle a=0.5 k=3"}
    for name, r in rows.items():          # the median of three runs, float32 on the CPU: the plain tokens
        assert len(r["runs_tokens_per_s"]) == 3 and sorted(r["runs_tokens_per_s"])[1] == r["tokens_per_s"]
        if name != "plain":
            assert r["identical_to_plain"] and r["agreement_with_plain"] == 1.0 and r["first_divergence"] is None
            assert r["all_blocks_free_at_end"]
    assert rows["draft_model=self k=3"]["per_draft_acceptance"] == 1.0          # the target drafting for itself
    perfect = rows["oracle a=1.0 k=3"]
    assert perfect["tokens_per_verify_pass"] == perfect["closed_form_tokens_per_pass"] == 4.0
    assert rows["oracle a=0.5 k=3"]["tokens_per_verify_pass"] < 4.0
    cost = report["verify_cost"]
    assert [r["batch"] for r in cost["rows"]] == [1, 2] and all(r["verify_ms"] > 0 for r in cost["rows"])
    assert report["goals"]["verify_over_decode_step_b1"] == cost["rows"][0]["ratio"]


def test_agreement_counts_equal_positions_and_names_the_first_that_differs():
    from engine.bench.spec import agreement
    assert agreement([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]]) == (1.0, None)
    assert agreement([[1, 9, 3], [4, 5]], [[1, 2, 3], [4, 5]]) == (0.8, 1)
    assert agreement([[1, 2, 3], [4, 6]], [[1, 2, 3], [7, 5]]) == (0.6, 0)


def test_serve_workload_reports_the_outputs_metrics_and_a_cancel_frees_every_block(one_torch_thread):
    from engine import EngineConfig, make_workload, serve_workload
    from engine.llm_engine import LLMEngine
    model, _ = serve_sim.load_model("tiny", "cpu", None, 0)
    cfg = EngineConfig(num_kv_blocks=24, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256)
    workload = make_workload("chatbot", 6, 0.05, model.config.vocab_size, seed=3)
    engine = LLMEngine(model, cfg)
    run = serve_workload(engine, workload)
    assert [len(o.outputs[0].token_ids) for o in run.outputs] == [r.output_len for r in workload]
    ttfts = sorted(o.metrics.ttft_s * 1e3 for o in run.outputs)
    assert run.metrics["ttft_ms"]["p50"] == round((ttfts[2] + ttfts[3]) / 2, 3)     # six values: the middle two
    assert run.metrics["steps"] == engine.trace.num_steps and run.metrics["all_blocks_free_at_end"]

    engine, calls = LLMEngine(model, cfg), []

    def stop_after_three():
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt("the reader pressed Stop")
    try:
        serve_workload(engine, workload, check=stop_after_three)
        raise AssertionError("the run should have stopped")
    except KeyboardInterrupt:
        pass
    assert engine.trace.num_steps == 3 and not engine.has_unfinished()
    assert engine.num_free_blocks() == cfg.num_kv_blocks and not engine.allocator_state().tables


def test_serve_sim_record_names_device_model_and_the_ratios_chapter_14_cites(monkeypatch, tmp_path, capsys):
    from engine.bench import recorded
    monkeypatch.setattr(recorded, "DATA_DIR", tmp_path)
    threads = torch.get_num_threads()
    try:
        serve_sim.run(["--small", "--num-requests", "6", "--scale", "0.04", "--max-num-seqs", "4", "--record"])
    finally:
        torch.set_num_threads(threads)
    saved = json.loads((tmp_path / "serve-sim.json").read_text())
    assert saved["command"].startswith("python -m engine bench serve-sim --small") and "--record" not in saved["command"]
    assert saved["model"]["name"] == "tiny-random" and saved["model"]["weights"] == "random" and saved["device"]
    r = saved["results"]
    assert r["workload"]["num_requests"] == 6 and r["continuous_vs_static"]["output_throughput_ratio"] > 0
