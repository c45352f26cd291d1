"""Recorded GPU measurements: benchmark JSON shipped with the repository, for the chapters and widgets.

A reader's machine usually has no GPU, so the figures the app shows for one (an H200's decode step,
the paged-attention kernel's bandwidth, throughput against Hugging Face) are measured once by a
benchmark on a real GPU and saved here as data, with what is needed to trust and redo them:

    engine/bench/data/NAME.json
    {"name": "kernels", "device": "NVIDIA H200", "date": "2026-11-26", "commit": "9adadac...",
     "command": "python -m engine bench kernels", "software": {"torch": "2.11.0+cu130", ...},
     "results": {...}}                       # whatever that benchmark prints
    (the model benchmarks add "model": {"name", "weights", "dtype", "parameters", "shape": {...}}, and
     name the file after a model other than SmolLM2: latency-llama-3-8b.json)

`load_recorded(name)` reads one (None when it was never recorded); `save_recorded(...)` writes one
(the GPU benchmarks call it when run with `--record`). A widget labels every such figure
"recorded on <device> by <command>, <date>", never "measured" (that word is for this server).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
_FIELDS = ("name", "device", "date", "commit", "command", "results")


def recorded_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


def load_recorded(name: str) -> dict | None:
    """The recorded run called `name`, or None. Raises ValueError if the file lacks a field."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"not a recorded-data name: {name!r}")
    path = DATA_DIR / f"{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    missing = [f for f in _FIELDS if f not in data]
    if missing:
        raise ValueError(f"{path} lacks {missing}")
    return data


def _git_commit() -> str:
    """ENGINE_COMMIT when set (on the GPU machine the tree travels without its current git history:
    `git rev-parse` there names an older commit), else git's HEAD."""
    if os.environ.get("ENGINE_COMMIT"):
        return os.environ["ENGINE_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save_recorded(name: str, device: str, command: str, results: dict, software: dict | None = None,
                  date: str | None = None, commit: str | None = None, model: dict | None = None) -> Path:
    """Write engine/bench/data/NAME.json (pretty, stable key order) and return its path."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    payload = {"name": name, "device": device, "date": date or _dt.date.today().isoformat(),
               "commit": commit or _git_commit(), "command": command}
    if model is not None:
        payload["model"] = model
    payload |= {"software": software or {}, "results": results}
    path = DATA_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path
