"""`python -m engine bench serve-sim` runs end to end and shows continuous batching ahead of static."""
from __future__ import annotations

import json

import torch

from engine import bench_serve


def test_serve_sim_small_mixed_workload(capsys):
    threads = torch.get_num_threads()
    try:
        report = bench_serve.run(["--small", "--num-requests", "9", "--scale", "0.04", "--max-num-seqs", "4"])
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
        assert bench_serve.main(["--small", "--num-requests", "3", "--scale", "0.02", "--mode", "continuous"]) == 0
    finally:
        torch.set_num_threads(threads)
    assert json.loads(capsys.readouterr().out)["results"].keys() == {"continuous"}
