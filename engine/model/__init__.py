"""The model: the Llama forward pass, the attention backends it calls, and the sampler."""
