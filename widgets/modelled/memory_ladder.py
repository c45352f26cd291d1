"""The rest of a GPU's memory ladder (chapter 13), on top of hardware.py's published figures.

hardware.py has what NVIDIA publishes: HBM, FLOP/s, SMs, on-chip capacities, NVLink, PCIe. This adds
what the data-flow widget needs beyond that, each with where it comes from:

    smem_bandwidth(gpu)       derived: 32 banks × 4 bytes per clock in each SM (CUDA C++ Programming
                              Guide, shared memory) × SMs × boost clock
    l2_bandwidth(gpu)         estimate: A100's published L2 read width, 5,120 bytes per clock (A100
                              whitepaper), × boost clock; NVIDIA gives no Hopper figure
    register_bandwidth(gpu)   rough estimate: per SM and clock, 4 schedulers × 32 threads × 3 operands
                              × 4 bytes, × SMs × boost clock
    HOST_MEMORY_BYTES, NETWORK_CARD_BYTES_S     the server around the GPU (DGX H100), not the GPU
    gpus_needed, ring_allreduce_bytes           a model too big for one GPU, split by tensor parallelism

Every number derived from these is modelled (labels.modelled). Bandwidths are bytes/s, decimal.
"""
from __future__ import annotations

import math

from widgets.modelled.hardware import GPU, KV_MEMORY_FRACTION

# Boost clocks, derived from each datasheet's FP32 peak = SMs × FP32 lanes per SM × 2 FLOP × clock:
# H100 SXM and H200 67 TFLOP/s over 132 SMs × 128 lanes -> 1.98 GHz; A100 19.5 TFLOP/s over 108 × 64 -> 1.41 GHz.
BOOST_CLOCK_HZ = {"H100 SXM": 1.98e9, "H200": 1.98e9, "A100 80GB SXM": 1.41e9}
L2_BYTES_PER_CLOCK = 5120
SOURCES = {
    "clock": "boost clock derived from the datasheet's FP32 peak: SMs × FP32 lanes × 2 FLOP × clock",
    "smem": "derived: 32 banks × 4 bytes per clock per SM (CUDA C++ Programming Guide) × SMs × boost clock",
    "l2": "estimate: A100's published L2 read width of 5,120 bytes per clock (A100 whitepaper) × boost "
          "clock; NVIDIA publishes no Hopper figure",
    "registers": "rough estimate: per SM and clock, 4 schedulers × 32 threads × 3 operands × 4 bytes, "
                 "× SMs × boost clock",
    "host": "NVIDIA DGX H100 datasheet: 2 TB of host memory; many servers have hundreds of GB",
    "network": "NVIDIA DGX H100 datasheet: one 400 Gb/s ConnectX-7 card per GPU, a part of the server, "
               "not of the GPU",
}

HOST_MEMORY_BYTES = 2e12                    # a DGX H100
NETWORK_CARD_BYTES_S = 400e9 / 8            # 400 Gb/s = 50 GB/s each way


def boost_clock(gpu: GPU) -> float:
    return BOOST_CLOCK_HZ[gpu.name]


def smem_bandwidth(gpu: GPU) -> float:
    return 32 * 4 * gpu.num_sms * boost_clock(gpu)


def l2_bandwidth(gpu: GPU) -> float:
    return L2_BYTES_PER_CLOCK * boost_clock(gpu)


def register_bandwidth(gpu: GPU) -> float:
    return 4 * 32 * 3 * 4 * gpu.num_sms * boost_clock(gpu)


def nvlink_each_way(gpu: GPU) -> float:
    """hardware.GPU.nvlink counts both directions of all links; one direction is half."""
    return gpu.nvlink / 2


def registers_total(gpu: GPU) -> float:
    return gpu.registers_per_sm * 4 * gpu.num_sms           # 32-bit registers: 4 bytes each


def smem_total(gpu: GPU) -> float:
    return gpu.smem_per_sm * gpu.num_sms


def sram_total(gpu: GPU) -> float:
    """Registers + shared memory + L2: all the fast memory on the chip, as chapter 13 adds it up."""
    return registers_total(gpu) + smem_total(gpu) + gpu.l2_bytes


def gpus_needed(need_bytes: float, gpu: GPU, usable: float = KV_MEMORY_FRACTION, most: int = 8) -> int | None:
    """Fewest GPUs (1, 2, 4, 8: how tensor parallelism splits a server) whose memory holds
    ``need_bytes`` with ``usable`` of each GPU in use; None if 8 are not enough."""
    n = 1
    while n <= most:
        if need_bytes / n <= usable * gpu.memory_bytes:
            return n
        n *= 2
    return None


def ring_allreduce_bytes(size: float, n: int) -> float:
    """Bytes each GPU sends (and receives) to all-reduce ``size`` bytes across ``n`` GPUs in a ring."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * size


def transfer_s(nbytes: float, bandwidth: float) -> float:
    """Time to move ``nbytes`` at ``bandwidth`` bytes/s: the model every rung of the ladder shares."""
    if not bandwidth > 0 or math.isinf(bandwidth):
        raise ValueError(f"bandwidth must be a positive number, got {bandwidth}")
    return nbytes / bandwidth
