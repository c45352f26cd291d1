"""One decode step's bytes, level by level, on one GPU (modelled): what the data-flow diagram draws.

    flow = decode_step_flow(MODELS["Llama-3-8B"], GPUS["H100 SXM"], batch=8, context=2048)
    flow.levels[0].key, flow.levels[0].bytes, flow.levels[0].time_s()    # "hbm", {kind: bytes}, seconds

The ladder, from where the bytes live to where they are used:

    registers  ▲ weights, KV reads, activations          ▼ KV writes
    SMEM / L1  │  every byte crosses every rung once:    │  (the new token's K and V
    L2         │  time at a rung = its bytes ÷ its       │   go back down to HBM)
    HBM        │  bandwidth; the slowest rung sets       │
               │  the step's pace                        │
    beside HBM: NVLink (other GPUs) · PCIe → host memory · network card (other servers)

The traffic of one step, per GPU:
    weights      every parameter is read once (parameters × bytes per parameter), shared by the batch
    KV reads     each request reads its whole cache: kv_bytes_per_token × context × batch
    KV writes    each request appends one token's K and V: kv_bytes_per_token × batch
    activations  each kernel writes its output and the next reads it back (see activation_bytes); small
                 enough at decode to stay in L2: the layers' tensors, and the logits, reach HBM only
                 when one of them outgrows half of L2

Assumptions, said once: bytes cross each rung exactly once (real kernels re-read some, so this is a
lower bound), levels overlap perfectly, and a model too big for one GPU is split evenly over 2, 4 or 8
GPUs (tensor parallelism, chapter 19), which all-reduce two hidden-size vectors per layer over NVLink.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine import ModelConfig
from widgets.modelled.hardware import GPU, decode_step, kv_bytes
from widgets.modelled.memory_ladder import (HOST_MEMORY_BYTES, NETWORK_CARD_BYTES_S, SOURCES, gpus_needed,
                                          l2_bandwidth, nvlink_each_way, register_bandwidth, registers_total,
                                          ring_allreduce_bytes, smem_bandwidth, smem_total, transfer_s)

KINDS = ("weights", "kv_read", "kv_write", "activations")
KIND_NAMES = {"weights": "weights", "kv_read": "KV reads", "kv_write": "KV writes", "activations": "activations"}
BYTES_PER_VALUE = 2          # bf16 weights, cache and activations
LOGIT_BYTES = 4              # logits are kept in float32 for sampling
BLOCK_SIZE = 16              # tokens per KV block (the engine's default): one block-table entry each


@dataclass(slots=True)
class Level:
    """One rung of the ladder and the bytes of this step that cross it."""
    key: str
    name: str
    where: str
    capacity_bytes: float
    capacity_text: str
    bandwidth: float                     # bytes/s
    bandwidth_kind: str                  # "published" | "derived" | "estimate"
    source: str
    bytes: dict[str, float]              # per kind (KINDS)
    holds: str                           # what lives here during the step

    def time_s(self, kind: str | None = None) -> float:
        """Bytes ÷ bandwidth: of one kind, or of all the step's bytes at this rung."""
        n = self.total_bytes() if kind is None else self.bytes[kind]
        return transfer_s(n, self.bandwidth)

    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    @property
    def capacity_short(self) -> str:
        return _size(self.capacity_bytes)


@dataclass(slots=True)
class Side:
    """A link or memory beside HBM: what this step sends over it, and what a bigger move would cost."""
    key: str
    name: str
    reaches: str
    capacity_text: str
    bandwidth: float | None              # bytes/s each way; None for a memory (its link has the rate)
    source: str
    step_bytes: float
    step_note: str
    whatif: list[tuple[str, float, float]] = field(default_factory=list)   # (what, bytes, seconds)

    def step_time_s(self) -> float:
        return 0.0 if self.bandwidth is None else transfer_s(self.step_bytes, self.bandwidth)


@dataclass(slots=True)
class StepFlow:
    model: ModelConfig
    gpu: GPU
    batch: int
    context: int
    gpus: int | None                     # GPUs the model is split over; None: more than 8 needed
    resident_bytes: float                # weights + whole KV cache, per GPU
    traffic: dict[str, float]            # per kind, per GPU, at the rung where it is largest
    levels: list[Level]
    side: list[Side]
    flops_time_s: float                  # the step's arithmetic at the GPU's bf16 peak
    allreduce_time_s: float              # NVLink time of tensor parallelism (0 on one GPU)

    def level(self, key: str) -> Level:
        return next(lv for lv in self.levels if lv.key == key)

    def bottleneck(self) -> Level:
        return max(self.levels, key=lambda lv: lv.time_s())

    def compute_bound(self) -> bool:
        """Past the ridge point (a big enough batch), the tensor cores, not a memory, set the pace."""
        return self.flops_time_s > self.bottleneck().time_s()

    def step_time_s(self) -> float:
        """Levels and arithmetic overlap, so the slowest sets the pace; the all-reduce waits on it."""
        return max(self.bottleneck().time_s(), self.flops_time_s) + self.allreduce_time_s

    def tokens_per_s(self) -> float:
        return self.batch / self.step_time_s()


def activation_values(m: ModelConfig, n: int = 1) -> float:
    """Values one token's layer hands between kernels on one of ``n`` GPUs: four hidden-size vectors
    (norm outputs, projection outputs: every GPU holds them whole) and q, k, v, the attention output,
    gate, up and their product (split across the GPUs)."""
    split = 2 * m.num_heads * m.head_dim + 2 * m.num_kv_heads * m.head_dim + 3 * m.intermediate_size
    return 4 * m.hidden_size + split / n


def activation_bytes(m: ModelConfig, batch: int, n: int = 1) -> float:
    """Written once and read once (× 2) per layer, plus the logits written and read by the sampler."""
    layers = 2 * batch * m.num_layers * activation_values(m, n) * BYTES_PER_VALUE
    return layers + 2 * batch * m.vocab_size * LOGIT_BYTES


def largest_layer_activation(m: ModelConfig, batch: int, n: int = 1) -> float:
    return batch * max(m.intermediate_size / n, m.hidden_size) * BYTES_PER_VALUE


def step_inputs_bytes(batch: int, context: int) -> float:
    """What the CPU sends and reads back each step over PCIe: per request a token id, a position and a
    slot (8 bytes each), its block-table row (4 bytes a block) and, back, the sampled token id."""
    return batch * (3 * 8 + 4 * math.ceil(context / BLOCK_SIZE) + 8)


def decode_step_flow(m: ModelConfig, gpu: GPU, batch: int, context: int) -> StepFlow:
    step = decode_step(m, gpu, batch, context)             # hardware.py's roofline record of the step
    kv_all = step.kv_read_bytes
    n = gpus_needed(step.weight_bytes + kv_all, gpu)
    per = n or 8                          # too big even for 8: show 8 GPUs' share and say it does not fit
    acts = activation_bytes(m, batch, per)
    logits = 2 * batch * m.vocab_size * LOGIT_BYTES
    # a tensor stays in L2 between the kernel that writes it and the one that reads it if it fits in half
    spill = ((acts - logits) * (largest_layer_activation(m, batch, per) > gpu.l2_bytes / 2)
             + logits * (logits / 2 > gpu.l2_bytes / 2))
    acts_in_l2 = spill == 0
    traffic = {"weights": step.weight_bytes / per, "kv_read": kv_all / per,
               "kv_write": step.kv_write_bytes / per, "activations": acts}
    on_chip = dict(traffic)
    at_hbm = dict(traffic, activations=float(spill))
    resident = (step.weight_bytes + kv_all) / per
    datasheet, on_chip_sources = gpu.sources[0], "; ".join(gpu.sources[1:])
    levels = [
        Level("registers", "Registers", "in each SM", registers_total(gpu),
              f"{_size(gpu.registers_per_sm * 4)} per SM · {_size(registers_total(gpu))} in all",
              register_bandwidth(gpu), "estimate", f"{SOURCES['registers']}; {on_chip_sources}", on_chip,
              "the numbers being multiplied this instant, in the tensor cores' operands"),
        Level("smem", "Shared memory / L1", "in each SM", smem_total(gpu),
              f"up to {_size(gpu.smem_per_sm)} per SM ({_size(gpu.l1_smem_per_sm)} with L1) · "
              f"{_size(smem_total(gpu))} in all",
              smem_bandwidth(gpu), "derived", f"{SOURCES['smem']}; {on_chip_sources}", on_chip,
              "tiles of weights and of K and V, a few KB each, loaded, used, and overwritten by the next"),
        Level("l2", "L2 cache", "shared by all SMs", gpu.l2_bytes, _size(gpu.l2_bytes),
              l2_bandwidth(gpu), "estimate", f"{SOURCES['l2']}; {on_chip_sources}", on_chip,
              "the activations passed between kernels" + ("" if acts_in_l2 else " (some too big this time: "
              "they spill to HBM)") + ", and weights and K/V on their way through"),
        Level("hbm", "HBM", "beside the chip", gpu.memory_bytes, f"{_size(gpu.memory_bytes)} of {gpu.memory_kind}",
              gpu.bandwidth, "published", datasheet, at_hbm,
              f"all the weights and the whole KV cache: {_size(resident)} of {_size(gpu.memory_bytes)}"),
    ]
    allreduce = (2 * m.num_layers * ring_allreduce_bytes(batch * m.hidden_size * BYTES_PER_VALUE, per)
                 if per > 1 else 0.0)
    one_cache = kv_bytes(m, context)
    nvlink, pcie = nvlink_each_way(gpu), gpu.pcie
    side = [
        Side("nvlink", "NVLink", "the other GPUs in the server", "their HBM", nvlink, datasheet, allreduce,
             f"split over {per} GPUs: two all-reduces per layer" if per > 1 else "one GPU: nothing to exchange",
             [("copy one request's KV cache to another GPU", one_cache, transfer_s(one_cache, nvlink))]),
        Side("pcie", gpu.pcie_kind, "the CPU and host memory", "", pcie, datasheet,
             step_inputs_bytes(batch, context), "token ids, positions and block-table rows in; sampled token ids out",
             [("swap one request's KV cache out to host memory", one_cache, transfer_s(one_cache, pcie)),
              ("load this GPU's share of the weights at start-up", step.weight_bytes / per,
               transfer_s(step.weight_bytes / per, pcie))]),
        Side("host", "Host memory", "the CPU's RAM", f"{_size(HOST_MEMORY_BYTES)} in a DGX H100; hundreds of GB "
             "in many servers", None, SOURCES["host"], 0.0,
             "the step's inputs are prepared here; swapped-out caches wait here", []),
        Side("nic", "Network card", "other servers (InfiniBand)", "the cluster", NETWORK_CARD_BYTES_S,
             SOURCES["network"], 0.0, "one server's decode sends nothing over the network",
             [("send one request's KV cache to another server", one_cache,
               transfer_s(one_cache, NETWORK_CARD_BYTES_S))]),
    ]
    return StepFlow(m, gpu, batch, context, n, resident, traffic, levels, side, step.compute_s / per,
                    transfer_s(allreduce, nvlink))


def _size(n: float) -> str:
    """On-chip sizes are powers of two (KiB, MiB) when they are whole KiB; the rest decimal, as the
    chapters write them, to three significant figures."""
    if n < 2 ** 30 and n % 1024 == 0:
        return f"{n / 2 ** 20:.3g} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.3g} KiB"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"
