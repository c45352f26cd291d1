"""`--model NAME` builds a public model's shapes with random values; anything else that is not a file or
folder is refused with the names that exist (never a silent SmolLM2)."""
from __future__ import annotations

import json
import re

import pytest
import torch

from engine import cli
from engine.config import RANDOM_SHAPES, EngineConfig, ModelConfig
from engine.loader.model_loader import load_model, random_shape
from engine.loader.weights import WeightsError
from engine.model.llama import Llama

PUBLIC = {   # the published shapes and parameter counts
    "llama-3-8b-random": {"num_layers": 32, "hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                              "intermediate_size": 14336, "vocab_size": 128256, "rope_theta": 500000.0,
                              "tie_word_embeddings": False, "parameters": 8_030_261_248},
    "llama-3.2-1b-random": {"num_layers": 16, "hidden_size": 2048, "num_heads": 32, "num_kv_heads": 8, "head_dim": 64,
                                "intermediate_size": 8192, "vocab_size": 128256, "rope_theta": 500000.0,
                                "tie_word_embeddings": True, "parameters": 1_235_814_400},
    "smollm2-random": {"num_layers": 30, "hidden_size": 576, "num_heads": 9, "num_kv_heads": 3, "head_dim": 64,
                           "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
                           "parameters": 134_515_008},
}


@pytest.mark.parametrize("name", PUBLIC)
def test_each_named_shape_has_the_published_shapes_and_parameter_count(name):
    want = dict(PUBLIC[name])
    parameters = want.pop("parameters")
    cfg = RANDOM_SHAPES[name]
    assert {k: getattr(cfg, k) for k in want} == want
    assert cfg.num_parameters() == parameters
    with torch.device("meta"):                       # the module itself, without allocating its weights
        assert sum(p.numel() for p in Llama(cfg).parameters()) == parameters


def test_a_name_selects_its_shape_and_random_weights_keep_the_models_own():
    assert random_shape(EngineConfig(model="llama-3-8b-random")) is RANDOM_SHAPES["llama-3-8b-random"]
    assert random_shape(EngineConfig(model="llama-3-8b-random", random_weights=True)).name == "Llama-3-8B"
    assert random_shape(EngineConfig(random_weights=True)) == ModelConfig()
    assert random_shape(EngineConfig()) is None                     # the embedded model's real weights


def test_random_weights_of_a_folder_take_its_shapes_without_reading_its_tensors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "tie_word_embeddings": True}))
    loaded = load_model(EngineConfig(model=str(tmp_path), random_weights=True, device="cpu"))
    cfg = loaded.model.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_kv_heads, cfg.vocab_size) == (2, 64, 2, 300)
    assert loaded.source is None and loaded.tokenizer.name == "bytes"


@pytest.mark.parametrize("argv", [["--model", "llama-3-8b"], ["--model", "llama-3-8b", "--random-weights"],
                                  ["--model", "no/such/folder", "--random-weights"]])
def test_an_unknown_model_is_refused_with_the_names_that_exist(argv, capsys):
    assert cli.main(["info", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --model {argv[1]}:")
    assert all(name in err for name in RANDOM_SHAPES)
    with pytest.raises(WeightsError, match=re.escape("llama-3.2-1b-random")):
        load_model(EngineConfig(model=argv[1], random_weights="--random-weights" in argv, device="cpu"))


def test_random_values_drawn_on_a_device_take_its_dtype_and_the_same_distribution():
    cfg = ModelConfig(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                      intermediate_size=128, vocab_size=256)
    model = Llama.random(cfg, seed=3, device="cpu", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert torch.equal(model.norm.weight, torch.ones_like(model.norm.weight))
    w = model.embed.weight.float()
    assert abs(w.std().item() - 0.02) < 0.002 and abs(w.mean().item()) < 0.002
    again = Llama.random(cfg, seed=3, device="cpu", dtype=torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))   # a seed is a seed
