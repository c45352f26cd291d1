"""The engine's core: who runs each step and where their K/V lives.

sequence (one stream of tokens) · scheduler and static_batching (the policies) · block_manager and
block_pool (the KV blocks) · records (the plain data handed between scheduler, runner and outputs) ·
step_trace (one StepRecord per step).
"""
