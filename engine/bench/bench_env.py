"""What every GPU benchmark report carries: the device, the software, the date, and (with --record)
a copy in engine/bench/data/NAME.json (recorded.py) for the chapters and widgets."""
from __future__ import annotations

import datetime as dt
import os
import re
import statistics
import sys
import time

import torch

from ..config import ModelConfig
from .recorded import save_recorded


def add_common_args(p, name: str) -> None:
    """The options every GPU benchmark shares."""
    p.add_argument("--model", default=None, help="a RANDOM_SHAPES name (smollm2-random, llama-3.2-1b-random, "
                   "llama-3-8b-random: random values) or a GGUF file / Hugging Face folder (default: SmolLM2)")
    p.add_argument("--random-weights", action="store_true", help="the model's shapes (SmolLM2's by default), "
                   "random values (no download)")
    p.add_argument("--small", action="store_true", help="CPU smoke run of the same code: a tiny random model")
    p.add_argument("--skip-hf", action="store_true", help="ours only, no Hugging Face peers")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", action="store_true", help=f"also write engine/bench/data/{name}[-MODEL].json "
                   "(the model's name is added for shapes other than SmolLM2's)")


# The benches' --small model: four layers of SmolLM2's kind, small enough for a CPU smoke run.
TINY = ModelConfig(num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=32,
                   intermediate_size=256, vocab_size=512, max_position_embeddings=8192, name="tiny-random")


def bench_model(args, device: torch.device):
    """(model, dtype): the tiny model with --small, else what --model / --random-weights name (loader rules:
    a RANDOM_SHAPES name or --random-weights builds random values on the device, in bf16 on CUDA)."""
    from ..config import EngineConfig
    from ..loader.model_loader import load_model
    from ..model.llama import Llama
    if args.small:
        return Llama.random(TINY, seed=args.seed).to(device).eval(), torch.float32
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    loaded = load_model(EngineConfig(model=args.model, device=str(device), dtype=dtype,
                                     random_weights=args.random_weights, seed=args.seed))
    return loaded.model, dtype


def weights_kind(args) -> str:
    from ..config import RANDOM_SHAPES
    return "random" if (args.small or args.random_weights or args.model in RANDOM_SHAPES) else "real"


def decode_weight_bytes(cfg, itemsize: int) -> int:
    """The weight bytes one decode step must read: every layer's matrices and norms, the final norm and the
    LM head's vocab x hidden matrix (an embedding lookup reads only the batch's rows: not counted)."""
    norms = (2 * cfg.num_layers + 1) * cfg.hidden_size
    return (cfg.matmul_parameters() + norms + cfg.vocab_size * cfg.hidden_size) * itemsize


def model_record(model, dtype: torch.dtype, weights: str) -> dict:
    """What a recorded file says about the model: its name, shapes, parameters, dtype and weights."""
    c = model.config
    return {"name": c.name, "weights": weights, "dtype": str(dtype).removeprefix("torch."),
            "parameters": sum(p.numel() for p in model.parameters()),
            "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "shape": {"num_layers": c.num_layers, "hidden_size": c.hidden_size, "num_heads": c.num_heads,
                      "num_kv_heads": c.num_kv_heads, "head_dim": c.head_dim,
                      "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
                      "rope_theta": c.rope_theta, "context_length": c.max_position_embeddings,
                      "tied_embeddings": c.tie_word_embeddings}}


def device_of(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"


def software() -> dict:
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    for module in ("triton", "transformers"):
        try:
            out[module] = __import__(module).__version__
        except ImportError:
            out[module] = None
    return out


def environment(name: str, device: torch.device, results: dict, model: dict | None = None) -> dict:
    out = {"benchmark": name, "device": device_name(device), "date": dt.date.today().isoformat(),
           "software": software(), "results": results}
    if model is not None:
        out["model"] = model
    return out


DEFAULT_MODELS = ("SmolLM2-135M-Instruct", "tiny-random")   # their records keep the benchmark's bare name


def recorded_name(benchmark: str, model: dict | None) -> str:
    """engine/bench/data/<this>.json: `latency` for SmolLM2 (what the chapters cite), `latency-llama-3-8b`
    for another model (lower case, [a-z0-9_-] only, as a chapter's {recorded:NAME:...} spells it)."""
    if model is None or model["name"] in DEFAULT_MODELS:
        return benchmark
    return f"{benchmark}-{re.sub(r'[^a-z0-9_-]+', '_', model['name'].lower())}"


def matmul_tflops(device: torch.device) -> float:
    """A large matrix product's rate (bf16 8192^3 on CUDA, float32 1024^3 on the CPU), TFLOP/s, median of 5:
    the compute ceiling prefill is measured against."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    times = []
    for i in range(6):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                a @ b
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / 10
        else:
            t0 = time.perf_counter()
            a @ b
            seconds = time.perf_counter() - t0
        if i:                                       # the first round warms up (clocks, cuBLAS handles)
            times.append(seconds)
    return float(f"{2 * n**3 / statistics.median(times) / 1e12:.3g}")   # 3 figures: a loaded CPU's 0.04 is not 0


def copy_bandwidth_gbs(device: torch.device) -> float:
    """Device-to-device copy bandwidth, read + write bytes per second (GB/s): the roofline's yardstick."""
    if device.type == "cuda":
        from kernels.bench.timing import copy_bandwidth_gbs as gpu_copy
        return round(gpu_copy(), 1)
    src = torch.ones(8 << 20)                       # CPU: 32 MiB, a few copies, the median
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return round(2 * src.numel() * 4 / statistics.median(times) / 1e9, 1)


def record_if_asked(report: dict, command: str, argv: list[str] | None) -> None:
    """With --record in argv: save the report's results as engine/bench/data/<recorded_name>.json.

    The commit is git's, or ENGINE_COMMIT when the run happens in a copy of the tree without .git."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--record" not in argv:
        return
    shown = " ".join([command] + [a for a in argv if a != "--record"])
    path = save_recorded(recorded_name(report["benchmark"], report.get("model")), report["device"], shown,
                         report["results"], report["software"], date=report["date"],
                         commit=os.environ.get("ENGINE_COMMIT") or None, model=report.get("model"))
    print(f"recorded {path}", file=sys.stderr)
