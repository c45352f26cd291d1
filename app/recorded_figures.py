"""Recorded GPU figures inside chapter prose: numbers read from engine/bench/data/*.json, never typed in.

Two inline directives (app/render.py turns them into HTML):

    {recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms}    one number, formatted: "2.41 ms"
    {recorded-source:latency}                                       where the numbers come from:
        "measured on NVIDIA H200 (recorded by `python -m engine bench latency`, 2026-11-26)"

A path walks the file's "results": `a.b` reads keys, `rows[batch=1,prompt_tokens=128]` picks the one
list item whose fields have those values. Formats: ms, x (a ratio), tok/s, gb/s, int, pct, num.
Until a benchmark has been recorded on a GPU the figure reads "not recorded yet", never a guess;
tests/app/test_recorded_figures.py checks that every path a chapter names exists in its file.
"""
from __future__ import annotations

import html
import re

from engine import load_recorded

FIGURE_RE = re.compile(r"\{recorded:(?P<name>[a-z0-9_-]+):(?P<path>[^|{}\s]+)(?:\|(?P<fmt>[a-z/%]+))?\}")
SOURCE_RE = re.compile(r"\{recorded-source:(?P<name>[a-z0-9_-]+)\}")
_SELECT_RE = re.compile(r"^(?P<key>[A-Za-z0-9_]+)(?:\[(?P<where>[^\]]+)\])?$")
NOT_YET = "not recorded yet"


class MissingFigure(LookupError):
    """The recorded file exists but holds no number at this path."""


def lookup(results, path: str) -> float:
    """The number at `path` inside a recorded file's results (see the module docstring)."""
    node = results
    for part in path.split("."):
        m = _SELECT_RE.match(part)
        if m is None or not isinstance(node, dict) or m["key"] not in node:
            raise MissingFigure(f"no {part!r} in the recorded results (path {path!r})")
        node = node[m["key"]]
        if m["where"]:
            want = dict(kv.split("=", 1) for kv in m["where"].split(","))
            found = [item for item in node if isinstance(item, dict)
                     and all(str(item.get(k)) == v for k, v in want.items())] if isinstance(node, list) else []
            if len(found) != 1:
                raise MissingFigure(f"{len(found)} items match [{m['where']}] (path {path!r})")
            node = found[0]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise MissingFigure(f"{path!r} is not a number: {node!r}")
    return float(node)


def format_value(value: float, fmt: str | None) -> str:
    if fmt == "ms":
        return f"{value:.3g} ms" if value < 100 else f"{value:,.0f} ms"
    if fmt == "x":
        return f"{value:.3g}×" if value < 100 else f"{value:,.0f}×"
    if fmt == "tok/s":
        return f"{value:,.0f} tokens/s"
    if fmt == "gb/s":
        return f"{value:,.0f} GB/s"
    if fmt == "int":
        return f"{value:,.0f}"
    if fmt == "pct":
        return f"{value:.0%}"
    return f"{value:.3g}"


def source_label(rec: dict) -> str:
    return f"measured on {rec['device']} (recorded by `{rec['command']}`, {rec['date']})"


def figure(name: str, path: str, fmt: str | None = None) -> tuple[str, str | None]:
    """(text, label): the formatted number and where it comes from, or ("not recorded yet", None)."""
    rec = load_recorded(name)
    if rec is None:
        return NOT_YET, None
    return format_value(lookup(rec["results"], path), fmt), source_label(rec)


def figure_html(name: str, path: str, fmt: str | None = None) -> str:
    try:
        text, label = figure(name, path, fmt)
    except MissingFigure:  # a page never breaks on data; the test suite is what catches a wrong path
        text, label = NOT_YET, None
    if label is None:
        return f'<span class="recorded-missing">{html.escape(text)}</span>'
    return f'<span class="recorded-figure" title="{html.escape(label)}">{html.escape(text)}</span>'


def source_html(name: str) -> str:
    rec = load_recorded(name)
    if rec is None:
        return (f'<span class="recorded-missing">not recorded yet (a GPU run of '
                f'<code>python -m engine bench {html.escape(name)} --record</code> fills these in)</span>')
    label = html.escape(source_label(rec)).split("`")
    inner = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(label))
    return f'<span class="recorded-source">{inner}</span>'
