"""Parallel engines a test starts for itself (not the shared per-split engines of test_parallel_engine.py):
a worker that dies between steps, `bench parallel`, and `generate --pp 2`. A module of their own, so the
per-split engines there have been closed (module teardown) before any of these starts one: a process has
one torch.distributed group, and an engine refuses to start while another holds it."""
import os
import signal

import pytest
import torch

from engine.distributed import parallel_engine
from engine.sampling_params import SamplingParams
from tests.engine.test_parallel_engine import children, config
from tests.helpers.parallel_tiny import tiny3


def test_a_dead_worker_ends_the_others_at_once_and_the_next_step_names_it(one_torch_thread):
    """With three ranks, rank 0 can wait in an all-reduce on a live worker that is itself stuck reporting
    its own failed collective (seen in CI: a hang of days, gloo's timeout). The executor's watch ends every
    worker as soon as one dies, so no wait is left on a live peer; the error names the one that died first."""
    import time
    engine = parallel_engine(tiny3(), tiny3, config(3, 1), torch.device("cpu"), torch.float32, threads=1)
    try:
        pids = engine.runner.worker_pids
        os.kill(pids[-1], signal.SIGKILL)                  # between steps: nothing is waiting yet
        deadline = time.monotonic() + 30
        while children(os.getpid()) & set(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not children(os.getpid()) & set(pids), "the live workers were not ended"
        engine.add_request("r", [3, 4, 5], SamplingParams(temperature=0.0, max_tokens=2))
        with pytest.raises(RuntimeError, match=r"worker rank 2 \(tensor-parallel rank 2\) exited with code -9"):
            engine.step()
    finally:
        engine.close()
    assert not torch.distributed.is_initialized()

def test_bench_parallel_prints_json_against_one_process(capsys, one_torch_thread):
    import json

    from engine.bench.parallel import main
    assert main(["--tiny", "--threads", "1", "--sizes", "single", "tp=3", "tp=4", "--prompts", "2", "--max-tokens", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    single, tp3, tp4 = report["sizes"]
    assert single["size"] == "single" and "per_step" not in single
    assert tp3["same_tokens_as_single"] and tp3["per_step"]["all_reduce_bytes_equal_tokens_x_hidden_x_bytes"]
    assert tp3["per_step"]["all_reduce_per_rank"]["calls"] == 12 and tp3["vs_single"]["throughput_tokens_per_s"] > 0
    decode = tp3["per_step"]["decode"]["all_reduce_per_rank"]      # eager on the CPU: every call timed
    assert decode["calls"] == 12 and decode["in_graph"] == 0 and 0 < decode["share_of_step"] < 1
    assert "sizes that work: 1, 2, 3, 6" in tp4["skipped"]          # whole query heads: 6 = 2 x 3


@pytest.mark.slow
def test_generate_pp2_starts_its_workers_and_prints_the_single_process_text(llm, capsys):
    """The real model through `python -m engine generate --pp 2`: two processes, the same greedy text."""
    from engine import cli
    prompt = "The capital of France is"
    want = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8))[0].outputs[0].text
    before = children(os.getpid())
    assert cli.main(["generate", "--pp", "2", "--raw", "--stats", "--max-tokens", "8", "--device", "cpu", prompt]) == 0
    out = capsys.readouterr()
    assert out.out == want + "\n"
    assert "stage hand-offs: " in out.err and "bubble" in out.err
    assert children(os.getpid()) <= before                  # the worker it started is gone
