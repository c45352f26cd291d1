"""Modelled arithmetic about hardware the reader does not have: GPU figures (with their sources),
the models the chapters compare, and what one decode step costs on them.

Pure functions of published figures — no Panel, no engine state, nothing measured — so every
number that comes out of here is labelled "modelled" on the page. Chapters 11–13 (and the serving
chapters) share it:

    gpu, cfg = GPUS["H100 SXM"], MODELS["Llama-3-8B"]
    ridge_intensity(gpu)                     -> 295.2    FLOP per byte: peak FLOP/s ÷ bandwidth
    step = decode_step(cfg, gpu, batch=64, context=1000)
    step.time_s, step.bound, step.tokens_per_s    -> 0.0073, "memory", ~8,770
    ridge_batch(cfg, gpu)                    -> ~317     the batch where a step turns compute-bound
    kv_bytes(cfg, 131_072)                   -> bytes of K and V for 128K tokens (2 bytes a value)
    kv_cache_budget(cfg, gpu)                -> bytes left for the KV cache: 90 % of memory − weights

One decode step, as modelled (every request adds one token and reads its whole context):

    bytes  = weights (read once, shared by the batch) + batch × context × KV bytes/token (own reads)
             + batch × KV bytes/token (the new K and V written)
    FLOPs  = batch × (2 × matmul parameters + 4 × layers × q heads × head_dim × context)
    time   = max(bytes ÷ bandwidth, FLOPs ÷ peak FLOP/s)     (the roofline: the slower one wins)

Real kernels reach a fraction of either peak; the recorded H200 figures (engine.load_recorded) say
how large a fraction.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine import ModelConfig

GB, TB, TFLOP = 1e9, 1e12, 1e12
MiB = 2**20


@dataclass(frozen=True, slots=True)
class GPU:
    name: str
    memory_bytes: float            # HBM capacity, as the vendor states it
    memory_kind: str
    bandwidth: float               # HBM bytes/s
    peak_flops: float              # dense bf16 FLOP/s on the tensor cores (no sparsity)
    num_sms: int
    l2_bytes: float
    smem_per_sm: int               # most shared memory one SM can give a kernel, bytes
    l1_smem_per_sm: int            # L1 + shared memory combined per SM, bytes
    registers_per_sm: int          # 32-bit registers
    nvlink: float                  # bytes/s, all links, both directions together
    pcie: float                    # bytes/s each way, to the host
    pcie_kind: str
    sources: tuple[str, ...]       # where the figures come from


GPUS: dict[str, GPU] = {
    "H100 SXM": GPU(
        "H100 SXM", 80 * GB, "HBM3", 3.35 * TB, 989 * TFLOP, 132, 50 * MiB, 228 * 1024, 256 * 1024, 65536,
        900 * GB, 64 * GB, "PCIe Gen5 x16",
        ("NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3, 3.35 TB/s, 989 TFLOP/s dense BF16, "
         "NVLink 900 GB/s, PCIe Gen5 128 GB/s (64 GB/s each way)",
         "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs, 50 MB L2 (binary units, as NVIDIA "
         "counts on-chip memory: the device reports 52,428,800 bytes), 256 KB L1/shared per SM",
         "NVIDIA Hopper Tuning Guide / CUDA C++ Programming Guide, compute capability 9.0: up to 228 KB "
         "shared memory per SM, 64K 32-bit registers per SM")),
    "H200": GPU(
        "H200", 141 * GB, "HBM3e", 4.8 * TB, 989 * TFLOP, 132, 60 * MiB, 228 * 1024, 256 * 1024, 65536,
        900 * GB, 64 * GB, "PCIe Gen5 x16",
        ("NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s dense BF16 "
         "(the H100's Hopper compute), NVLink 900 GB/s, PCIe Gen5 128 GB/s",
         "reported by the H200 we measure on (torch.cuda.get_device_properties): 132 SMs, 60 MiB L2",
         "Hopper (compute capability 9.0) per-SM figures as for the H100")),
    "A100": GPU(
        "A100 80GB SXM", 80 * GB, "HBM2e", 2.0 * TB, 312 * TFLOP, 108, 40e6, 164 * 1024, 192 * 1024, 65536,
        600 * GB, 32 * GB, "PCIe Gen4 x16",
        ("NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): 80 GB HBM2e, 2,039 GB/s (2.0 TB/s), 312 TFLOP/s "
         "dense BF16, NVLink 600 GB/s, PCIe Gen4 64 GB/s (32 GB/s each way)",
         "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs, 40 MB L2, 192 KB L1/shared per SM, "
         "up to 164 KB shared memory per SM, 64K 32-bit registers per SM")),
}

# Shapes from each model's published config.json (Hugging Face: HuggingFaceTB/SmolLM2-135M-Instruct,
# meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B, meta-llama/Llama-3.1-70B). Llama-3-70B was
# trained for 8,192 positions; Llama-3.1-70B has the same shapes and a 131,072-token (128K) context.
MODELS: dict[str, ModelConfig] = {
    "SmolLM2-135M": ModelConfig(name="SmolLM2-135M"),      # the engine's defaults are SmolLM2's shapes
    "Llama-3-8B": ModelConfig(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                              intermediate_size=14336, vocab_size=128256, rope_theta=500000.0,
                              max_position_embeddings=8192, tie_word_embeddings=False, name="Llama-3-8B"),
    "Llama-3-70B": ModelConfig(num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, head_dim=128,
                               intermediate_size=28672, vocab_size=128256, rope_theta=500000.0,
                               max_position_embeddings=8192, tie_word_embeddings=False, name="Llama-3-70B"),
    "Llama-3.1-70B": ModelConfig(num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, head_dim=128,
                                 intermediate_size=28672, vocab_size=128256, rope_theta=500000.0,
                                 max_position_embeddings=131072, tie_word_embeddings=False, name="Llama-3.1-70B"),
}

BF16 = 2                    # bytes per value for weights and KV cache unless said otherwise
KV_MEMORY_FRACTION = 0.9    # of GPU memory an engine may use (vLLM's default gpu_memory_utilization, and
                            # engine/worker/memory.py's). It caps everything the instance holds: weights,
                            # the KV cache AND a step's working space (activations; CUDA graphs' memory),
                            # so activations come out of the 90 %, not the other 10 %. These models leave
                            # the working space out (they do not run a profile pass): their KV budget is
                            # an upper bound, a little above what an engine would get.


# -- a model's size ------------------------------------------------------------------------------
def num_parameters(cfg: ModelConfig) -> int:
    """Every weight: embeddings, per layer q/k/v/o + gate/up/down + two norms, final norm, LM head."""
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * cfg.intermediate_size + 2 * h
    head = 0 if cfg.tie_word_embeddings else cfg.vocab_size * h
    return cfg.vocab_size * h + cfg.num_layers * per_layer + h + head


def matmul_parameters(cfg: ModelConfig) -> int:
    """The weights a token is multiplied by (2 FLOPs each): all but the embedding lookup (which only
    reads one row) — unless the LM head is that same table, tied."""
    untied_lookup = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    return num_parameters(cfg) - untied_lookup


def weight_bytes(cfg: ModelConfig, bytes_per_value: int = BF16) -> int:
    return num_parameters(cfg) * bytes_per_value


def kv_bytes_per_token(cfg: ModelConfig, bytes_per_value: int = BF16) -> int:
    """2 (K and V) × layers × KV heads × head_dim × bytes: the engine's own formula."""
    return cfg.kv_bytes_per_token(bytes_per_value)


def kv_bytes(cfg: ModelConfig, tokens: int, bytes_per_value: int = BF16) -> int:
    return tokens * kv_bytes_per_token(cfg, bytes_per_value)


def kv_cache_budget(cfg: ModelConfig, gpu: GPU, bytes_per_value: int = BF16,
                    memory_fraction: float = KV_MEMORY_FRACTION) -> float:
    """Bytes left for the KV cache on one GPU: the usable share of memory minus the weights (≤ 0: the
    weights alone do not fit). An upper bound: a real engine also takes one step's peak activations out
    of that share before it sizes the cache."""
    return gpu.memory_bytes * memory_fraction - weight_bytes(cfg, bytes_per_value)


def max_cached_tokens(cfg: ModelConfig, gpu: GPU, bytes_per_value: int = BF16) -> int:
    """How many tokens' K and V fit in that budget (shared by every request on the GPU)."""
    return max(0, int(kv_cache_budget(cfg, gpu, bytes_per_value) // kv_bytes_per_token(cfg, bytes_per_value)))


# -- the roofline --------------------------------------------------------------------------------
def ridge_intensity(gpu: GPU) -> float:
    """FLOPs a kernel must do per byte it reads to keep the arithmetic busy: peak FLOP/s ÷ bandwidth."""
    return gpu.peak_flops / gpu.bandwidth


@dataclass(frozen=True, slots=True)
class DecodeStep:
    """One modelled decode step of `batch` requests, each with `context` tokens already cached."""
    batch: int
    context: int
    flops: float
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    memory_s: float                # all bytes ÷ bandwidth
    compute_s: float               # all FLOPs ÷ peak

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def time_s(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def tokens_per_s(self) -> float:
        """All users together: one token per request per step."""
        return self.batch / self.time_s

    @property
    def per_user_tokens_per_s(self) -> float:
        return 1 / self.time_s


def decode_flops_per_token(cfg: ModelConfig, context: int) -> float:
    """Matmuls (2 FLOPs per weight) plus attention over the cache (q·k and p·v: 4 per layer, q head,
    head_dim and cached token)."""
    return 2 * matmul_parameters(cfg) + 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * context


def decode_step(cfg: ModelConfig, gpu: GPU, batch: int, context: int = 0, bytes_per_value: int = BF16,
                bandwidth: float | None = None) -> DecodeStep:
    """The roofline model of one step (``bandwidth`` overrides the GPU's, e.g. a recorded one)."""
    kv_tok = kv_bytes_per_token(cfg, bytes_per_value)
    flops = batch * decode_flops_per_token(cfg, context)
    w, kv_read, kv_write = weight_bytes(cfg, bytes_per_value), batch * context * kv_tok, batch * kv_tok
    bw = bandwidth or gpu.bandwidth
    return DecodeStep(batch, context, flops, w, kv_read, kv_write, (w + kv_read + kv_write) / bw,
                      flops / gpu.peak_flops)


def ridge_batch(cfg: ModelConfig, gpu: GPU, context: int = 0, bytes_per_value: int = BF16) -> float | None:
    """The batch at which compute time catches up with memory time (a real number, the corner of the
    curve), or None if it never does: each request's own KV reads grow as fast as its arithmetic.

        b × F / peak = (W + b × K) / bw   =>   b = W / (F × bw / peak − K)
    with F FLOPs and K bytes (cache read + write) per request, W the weights' bytes."""
    f = decode_flops_per_token(cfg, context)
    k = (context + 1) * kv_bytes_per_token(cfg, bytes_per_value)
    denominator = f / ridge_intensity(gpu) - k
    return weight_bytes(cfg, bytes_per_value) / denominator if denominator > 0 else None


def prefill_time_s(cfg: ModelConfig, gpu: GPU, tokens: int) -> float:
    """Compute-bound prefill at peak: prompt tokens × 2 FLOPs per matmul weight (attention ignored)."""
    return tokens * 2 * matmul_parameters(cfg) / gpu.peak_flops
