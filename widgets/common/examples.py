"""Precomputed first examples: a widget paints real engine output at once, before the model is loaded.

    @example("tokenizer")                      # in the widget's module
    def tokenizer_example(llm) -> dict:        # JSON-able data, computed by the real engine
        return {...}

    ex = load_example("tokenizer")             # in the widget: paint ex.data at once, label it ex.label
    ex.label  -> "recorded on cpu (2 threads) by `python -m widgets.examples tokenizer` (2025-11-26)"

The data is saved in ``example.json`` in the widget's folder with the command that regenerates it, the device
and the date. ``python -m widgets.examples`` recomputes every example (or the names given) with the
embedded model on the CPU. ``widgets.common.testing.assert_example_fresh(name, llm)`` recomputes one in
a unit test and compares it with the saved file, so a saved example can never drift from the engine.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from widgets.common.labels import recorded
from widgets.common.registry import directive_of, folder_of, registry

_COMPUTE: dict[str, Callable[[Any], Any]] = {}


def example(fn=None, *, name: str | None = None):
    """``@example`` on ``fn(llm) -> data`` in a widget's folder: the way to compute its saved example
    (``example.json`` beside it)."""
    def register(f):
        _COMPUTE[name or directive_of(f.__module__)] = f
        return f
    return register(fn) if fn is not None else register


def example_path(name: str) -> Path:
    return folder_of(name) / "example.json"


def command(name: str) -> str:
    return f"python -m widgets.examples {name}"


@dataclass(slots=True, frozen=True)
class Example:
    name: str
    data: Any
    device: str
    date: str
    command: str

    @property
    def label(self) -> str:
        return recorded(self.device, self.command, self.date)


def rounded(value: Any, digits: int = 5) -> Any:
    """JSON-able copy with floats rounded (saved files stay small and diff cleanly)."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def load_example(name: str) -> Example | None:
    """The saved example, or None if it was never computed (the widget then shows a placeholder)."""
    path = example_path(name)
    if not path.exists():
        return None
    d = json.loads(path.read_text(encoding="utf-8"))
    return Example(name, d["data"], d["device"], d["date"], d["command"])


def compute_example(name: str, llm) -> Any:
    if name not in _COMPUTE:
        registry()                    # importing the widgets registers every example
    return rounded(_COMPUTE[name](llm))


def save_example(name: str, llm) -> Path:
    data = compute_example(name, llm)
    path = example_path(name)
    record = {"widget": name, "command": command(name), "device": llm.device_name,
              "date": _dt.date.today().isoformat(), "data": data}
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


def names() -> list[str]:
    registry()
    return sorted(_COMPUTE)


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m widgets.examples",
                                     description="Recompute the widgets' saved first examples with the real model on the CPU.")
    parser.add_argument("names", nargs="*", help=f"examples to recompute (default: all of {names()})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(names()))
    if unknown:
        parser.error(f"no example called {', '.join(unknown)}")
    from engine import LLM
    llm = LLM(device="cpu")
    for name in args.names or names():
        print(f"{name}: {save_example(name, llm)}")
    llm.close()
    return 0
