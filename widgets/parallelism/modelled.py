"""The big-model view beside the real run: Llama-3-70B over 8 GPUs, NVLink against PCIe (modelled).

Arithmetic on published figures (widgets/modelled/hardware.py, memory_ladder.py), nothing measured:

    all-reduce size     tokens x hidden x 2 bytes (bf16), twice per layer: 160 per pass for 80 layers
    ring traffic        each GPU sends and receives 2(N-1)/N of it (ring_allreduce_bytes)
    link time           ring bytes / one direction of the link (NVLink 450 GB/s, PCIe Gen5 x16 64 GB/s)
    fixed cost          + CALL_S per all-reduce: an assumed start-up delay, not a measurement
    compute             decode: the roofline step (hardware.decode_step) with each GPU reading 1/N of
                        the weights and KV; prefill: FLOPs at the bf16 peak over N GPUs
    pipeline            one hidden vector per token per stage boundary (vLLM's Llama sends the hidden
                        state and the residual: twice that), over the same links or a network card
"""
from __future__ import annotations

from widgets.modelled.hardware import BF16, GPUS, MODELS, decode_step, prefill_time_s, weight_bytes
from widgets.modelled.memory_ladder import NETWORK_CARD_BYTES_S, nvlink_each_way, ring_allreduce_bytes, transfer_s

MODEL, GPU, NUM_GPUS = "Llama-3-70B", "H100 SXM", 8
CALL_S = 10e-6               # assumed fixed cost of one all-reduce call (launch + synchronisation)
CONTEXT = 1000               # cached tokens per request in the decode scenarios
SCENARIOS = {                # name -> (tokens per step, decode?)
    "decode, 1 user": (1, True),
    "decode, 64 users": (64, True),
    "prefill, 2,000 tokens": (2000, False),
}


def links(gpu) -> dict[str, float]:
    """Bytes/s in one direction."""
    return {"NVLink": nvlink_each_way(gpu), "PCIe": gpu.pcie}


def tensor_parallel(scenario: str, n: int = NUM_GPUS) -> dict:
    cfg, gpu = MODELS[MODEL], GPUS[GPU]
    tokens, decode = SCENARIOS[scenario]
    size = tokens * cfg.hidden_size * BF16
    calls = 2 * cfg.num_layers
    ring = ring_allreduce_bytes(size, n)
    if decode:
        compute = decode_step(cfg, gpu, batch=tokens, context=CONTEXT).time_s / n
    else:
        compute = prefill_time_s(cfg, gpu, tokens) / n
    per_link = {}
    for name, bw in links(gpu).items():
        move = calls * transfer_s(ring, bw)
        fixed = calls * CALL_S
        per_link[name] = {"bandwidth": bw, "move_s": move, "fixed_s": fixed, "comm_s": move + fixed,
                          "share": (move + fixed) / (move + fixed + compute)}
    return {"model": MODEL, "gpu": GPU, "gpus": n, "scenario": scenario, "tokens": tokens,
            "weights_per_gpu": weight_bytes(cfg) / n, "all_reduce_bytes": size, "calls": calls,
            "ring_factor": 2 * (n - 1) / n, "ring_bytes": ring, "compute_s": compute, "links": per_link}


def pipeline(scenario: str, stages: int = NUM_GPUS) -> dict:
    cfg, gpu = MODELS[MODEL], GPUS[GPU]
    tokens, _ = SCENARIOS[scenario]
    hidden = tokens * cfg.hidden_size * BF16
    over = {**links(gpu), "network card": NETWORK_CARD_BYTES_S}
    return {"stages": stages, "boundaries": stages - 1, "hidden_bytes": hidden, "vllm_bytes": 2 * hidden,
            "layers_per_stage": cfg.num_layers // stages, "weights_per_gpu": weight_bytes(cfg) / stages,
            "handoff_s": {name: transfer_s(hidden, bw) for name, bw in over.items()}}
