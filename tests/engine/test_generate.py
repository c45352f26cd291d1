"""The LLM front door: generate, stream, stop conditions, metrics, the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine import SamplingParams


def test_instruct_model_answers_paris(llm):
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0.0, max_tokens=24))[0]
    answer = out.outputs[0]
    assert "Paris" in answer.text
    assert answer.finish_reason == "stop" and answer.stop_reason is None     # it ended its turn itself (EOS)
    m = out.metrics
    assert m.ttft_s > 0 and len(m.itl_s) == len(answer.token_ids) - 1 and m.e2e_s >= m.ttft_s


def test_stream_events_add_up_to_the_text(llm):
    events = list(llm.stream("The capital of France is", SamplingParams(temperature=0.0, max_tokens=12)))
    assert len(events) == 12 and events[-1].finished and events[-1].finish_reason == "length"
    assert not any(e.finished for e in events[:-1])
    assert "".join(e.text_delta for e in events) == events[-1].text
    assert events[-1].text == llm.tokenizer.decode([e.token_id for e in events], skip_special_tokens=True)


def test_stop_string_ends_generation_before_it(llm):
    full = llm.generate("The capital of France is", SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0].text
    stop = full.strip().split()[1]           # a word the greedy continuation is known to contain
    out = llm.generate("The capital of France is", SamplingParams(temperature=0.0, max_tokens=12, stop=[stop]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop and stop not in out.text and full.startswith(out.text)


def test_seeded_sampling_is_reproducible(llm):
    p = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=10, seed=1234, ignore_eos=True)
    a = llm.generate("Once upon a time", p)[0].outputs[0].token_ids
    b = llm.generate("Once upon a time", p)[0].outputs[0].token_ids
    c = llm.generate("Once upon a time", SamplingParams(temperature=1.0, top_p=0.9, max_tokens=10, seed=99, ignore_eos=True))[0].outputs[0].token_ids
    assert a == b and a != c


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_p=0), dict(max_tokens=0), dict(top_k=-2)])
def test_bad_sampling_params_are_refused(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


@pytest.mark.slow                  # the command loads the real model in its own process
def test_cli_generate_streams_the_answer():
    proc = subprocess.run([sys.executable, "-m", "engine", "generate", "What is the capital of France?"],
                          capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout


@pytest.mark.slow
def test_cli_info_reports_shapes_and_kv_bytes():
    proc = subprocess.run([sys.executable, "-m", "engine", "info", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["num_layers"] == 30 and info["num_kv_heads"] == 3 and info["head_dim"] == 64
    assert info["parameters"] == 134_515_008
    assert info["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 4          # float32 on CPU
    # the context the engine accepts: the model's, or less when the KV cache holds fewer tokens
    assert 0 < info["max_model_len"] <= info["context_length"] == 8192
    assert info["max_model_len"] == min(8192, info["kv_cache_blocks"] * 16)


def test_cli_reads_a_prompt_too_long_for_the_command_line_from_a_file_or_stdin(tmp_path, monkeypatch):
    """200,000 characters cannot be an argument (the OS refuses the argument list); from a file they
    arrive whole, and the engine's length limit answers with one clear line."""
    import io

    from engine.cli import build_parser, read_prompt

    path = tmp_path / "prompt.txt"
    path.write_text("a" * 200_000)
    proc = subprocess.run([sys.executable, "-m", "engine", "generate", "--random-weights", "--device", "cpu",
                           "--max-tokens", "2", "--raw", "--prompt-file", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "prompt is 200000 tokens long" in proc.stderr and "Traceback" not in proc.stderr
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello from stdin"))
    assert read_prompt(build_parser().parse_args(["generate", "--prompt-file", "-"])) == "hello from stdin"
    with pytest.raises(ValueError):                         # one prompt, not two (nor none)
        read_prompt(build_parser().parse_args(["generate", "two", "--prompt-file", str(path)]))
    with pytest.raises(ValueError):
        read_prompt(build_parser().parse_args(["generate"]))
