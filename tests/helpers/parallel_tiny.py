"""The tiny model the parallel tests run on: 6 query heads over 3 KV heads (tensor-parallel sizes 1, 3
and 6 with KV heads copied), 6 layers (2, 3 and 6 stages split evenly, 5 does not), and weights 10x
larger than Llama.random's so greedy outputs vary with the context instead of repeating one token."""
import torch

from engine.config import ModelConfig
from engine.model.llama import Llama

T3 = ModelConfig(num_layers=6, hidden_size=96, num_heads=6, num_kv_heads=3, head_dim=16, intermediate_size=160,
                 vocab_size=256, max_position_embeddings=512, name="tiny-3")
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22], list(range(30, 70))]   # the last one is chunked


def _loud(config: ModelConfig) -> Llama:
    """Llama.random's weights of `config`, ten times larger (the norms' excepted)."""
    model = Llama.random(config, seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(10.0)
    return model


def tiny3() -> Llama:
    """Picklable: spawned workers call it to build the same whole model."""
    return _loud(T3)


# 4 query heads over 2 KV heads: at tp = 4 each rank holds one query head and a copy of its KV head
T4 = ModelConfig(num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96,
                 vocab_size=256, max_position_embeddings=512, name="tiny-4q2kv")


def tiny4() -> Llama:
    return _loud(T4)
