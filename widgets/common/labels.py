"""Where every number comes from, in the same words everywhere (widgets/README.md, point 3).

    measured(llm.device_name)                 -> "measured on cpu (2 threads)"
    recorded("NVIDIA H200", "python -m engine bench kernels", "2025-11-20")
                                              -> "recorded on NVIDIA H200 by `python -m engine bench kernels` (2025-11-20)"
    recorded_label(load_recorded("kernels"))  -> the same, from a recorded file's own fields
    modelled()                                -> "modelled"
    label_html(measured("cpu (2 threads)"))   -> '<span class="w-label w-label-measured">measured on …</span>'

"measured" is what this server just computed; "recorded" is data shipped in the repo with the command
that made it, its device and date (GPU benchmarks, and each widget's precomputed first example);
"modelled" is arithmetic about hardware the reader does not have.
"""
from __future__ import annotations

from widgets.common.text import esc


def measured(device_name: str, took_s: float | None = None) -> str:
    """This server computed it just now (optionally: how long it took)."""
    took = "" if took_s is None else f" in {_duration(took_s)}"
    return f"measured on {device_name}{took}"


def recorded(device_name: str, command: str, date: str) -> str:
    """Shipped data: computed ahead of time by ``command`` on ``device_name`` on ``date``."""
    return f"recorded on {device_name} by `{command}` ({date})"


def recorded_label(data: dict) -> str:
    """``recorded(...)`` of a recorded benchmark file (engine/bench/data/*.json): its device, command, date."""
    return recorded(data["device"], data["command"], data["date"])


def modelled(detail: str = "") -> str:
    """Arithmetic about hardware, not a measurement."""
    return f"modelled ({detail})" if detail else "modelled"


def kind_of(label: str) -> str:
    return label.split(" ", 1)[0]      # "measured" | "recorded" | "modelled"


def label_html(label: str) -> str:
    """A small tag for the page; backticks become <code>."""
    parts = esc(label).split("`")
    body = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    return f'<span class="w-label w-label-{kind_of(label)}">{body}</span>'


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"
