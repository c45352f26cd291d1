"""The worker side: the preallocated KV cache and the model runner that turns one scheduler record
into one forward pass."""
