"""The tiny random model the engine tests run on: small enough that a step takes a millisecond on CPU,
with GQA (4 query heads over 2 KV heads) so the paged path is exercised in full."""
from engine.config import ModelConfig

TINY = ModelConfig(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=256, max_position_embeddings=2048, name="tiny-random")

# The GPU tests' small model: a bit wider, with a 512-token vocabulary and a 4,096-token context.
SMALL = ModelConfig(num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=32,
                    intermediate_size=256, vocab_size=512, max_position_embeddings=4096, name="small-random")
