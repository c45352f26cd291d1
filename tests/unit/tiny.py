"""The tiny random model the engine tests run on: small enough that a step takes a millisecond on CPU,
with GQA (4 query heads over 2 KV heads) so the paged path is exercised in full."""
from engine.config import ModelConfig

TINY = ModelConfig(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=256, max_position_embeddings=2048, name="tiny-random")
