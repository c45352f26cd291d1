"""Kernel benchmarking and tuning (GPU): `python -m kernels.bench` and `python -m kernels.bench.tune`.

scenarios builds paged batches (the tests use it too), timing measures GPU time with a cold L2,
attention compares the Triton kernel with the bandwidth limit and SDPA, tune sweeps launch knobs.
"""
