"""The weights cache: fetched once, reused offline, corrupt files caught with one clear message."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch

from engine.loader import wheel
from engine.loader.weights import WeightsError, default_gguf_path, load_weights


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_EXPLAINER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_network(*args, **kwargs):
    raise AssertionError("this load should not touch the network")


@pytest.fixture
def seeded_cache(llm, tmp_cache):
    """A temporary cache holding the GGUF that the session fixture already fetched."""
    tmp_cache.mkdir(parents=True)
    shutil.copy(llm.source, default_gguf_path())
    return tmp_cache


def test_second_load_uses_the_cache_and_no_network(seeded_cache, monkeypatch):
    monkeypatch.setattr(wheel, "_download_wheel", _no_network)
    monkeypatch.setattr(subprocess, "Popen", _no_network)
    first = load_weights()                      # dequantizes and writes the safetensors cache
    assert len(list((seeded_cache / "dequantized").glob("*.safetensors"))) == 1
    second = load_weights()                     # reads the cache only
    assert second.config == first.config
    assert torch.equal(second.state_dict["layers.0.attention.wq.weight"], first.state_dict["layers.0.attention.wq.weight"])
    assert second.tokenizer.encode("Hello world").ids == [19556, 905]


def test_torn_weights_cache_is_rebuilt(seeded_cache):
    load_weights()
    [cached] = (seeded_cache / "dequantized").glob("*.safetensors")
    cached.write_bytes(cached.read_bytes()[:1000])   # a crash mid-write, say
    again = load_weights()
    assert again.state_dict["embed.weight"].shape == (49152, 576)


def test_offline_with_empty_cache_gives_one_clear_error(tmp_cache, monkeypatch):
    monkeypatch.setattr(wheel, "_run_forwarding_output", lambda cmd: 1)     # pip failing, as offline
    with pytest.raises(WeightsError) as err:
        load_weights()
    msg = str(err.value)
    assert "network" in msg and "--model" in msg and str(tmp_cache) in msg


def test_corrupt_cached_default_is_reported_and_removed(tmp_cache):
    tmp_cache.mkdir(parents=True)
    path = default_gguf_path()
    path.write_bytes(b"GGUF" + os.urandom(4096))
    with pytest.raises(WeightsError, match="corrupt"):
        load_weights()
    assert not path.exists()                       # the next run fetches a fresh copy


def test_cli_reports_a_corrupt_model_file_without_a_traceback(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file at all")
    proc = subprocess.run([sys.executable, "-m", "engine", "generate", "hi", "--model", str(bad)],
                          capture_output=True, text=True, env={**os.environ, "LLM_EXPLAINER_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "not a readable GGUF" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(WeightsError, match="no such file"):
        load_weights(tmp_path / "nothing-here")


def test_hugging_face_folder_loads_and_matches_transformers(tmp_path):
    """--model accepts a Hugging Face folder: a tiny random Llama saved by transformers gives the same logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine import LLM
    from engine.model.llama import ContiguousKV
    from engine.loader.tokenizer import byte_tokenizer

    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rope_theta=10000.0, tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(cfg).eval()
    hf.save_pretrained(tmp_path)
    byte_tokenizer().tok.save(str(tmp_path / "tokenizer.json"))
    llm = LLM(model=str(tmp_path), device="cpu")
    ids = llm.tokenizer.encode("hello paged world").ids
    with torch.inference_mode():
        ours = llm.model.compute_logits(llm.model(torch.tensor(ids), torch.arange(len(ids)), ContiguousKV(2)))
        theirs = hf(torch.tensor([ids])).logits[0]
    assert (ours - theirs).abs().max().item() < 1e-4


def test_pip_output_reaches_a_stderr_without_a_file_descriptor(monkeypatch):
    """The app's server shows load progress by swapping sys.stderr for an object with no fileno; the
    first start's download must still run (it once failed there with UnsupportedOperation: fileno)."""
    import io
    console = io.StringIO()
    monkeypatch.setattr(sys, "stderr", console)
    code = wheel._run_forwarding_output([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert code == 3
    assert "out" in console.getvalue() and "err" in console.getvalue()
