"""What every GPU benchmark report carries: the device, the software, the date, and (with --record)
a copy in engine/bench/data/NAME.json (recorded.py) for the chapters and widgets."""
from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import time

import torch

from .recorded import save_recorded


def add_common_args(p, name: str) -> None:
    """The options every GPU benchmark shares."""
    p.add_argument("--random-weights", action="store_true", help="SmolLM2's shapes, random values (no download)")
    p.add_argument("--small", action="store_true", help="CPU smoke run of the same code: a tiny random model")
    p.add_argument("--skip-hf", action="store_true", help="ours only, no Hugging Face peers")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", action="store_true", help=f"also write engine/bench/data/{name}.json")


def bench_model(args, device: torch.device):
    """(model, dtype): the tiny model with --small, SmolLM2's shapes with --random-weights, else the real one."""
    from ..config import EngineConfig, ModelConfig
    from ..model.llama import Llama
    from .serve_sim import TINY
    cfg, dtype = (TINY, torch.float32) if args.small else (
        ModelConfig(), torch.bfloat16 if device.type == "cuda" else torch.float32)
    if args.small or args.random_weights:
        return Llama.random(cfg, seed=args.seed).to(device, dtype).eval(), dtype
    from ..loader.model_loader import load_model
    return load_model(EngineConfig(device=str(device), dtype=dtype)).model, dtype


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


def environment(name: str, device: torch.device, results: dict) -> dict:
    return {"benchmark": name, "device": device_name(device), "date": dt.date.today().isoformat(),
            "software": software(), "results": results}


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
    """With --record in argv: save the report's results as engine/bench/data/<benchmark>.json.

    The commit is git's, or ENGINE_COMMIT when the run happens in a copy of the tree without .git."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--record" not in argv:
        return
    shown = " ".join([command] + [a for a in argv if a != "--record"])
    path = save_recorded(report["benchmark"], report["device"], shown, report["results"], report["software"],
                         date=report["date"], commit=os.environ.get("ENGINE_COMMIT") or None)
    print(f"recorded {path}", file=sys.stderr)
