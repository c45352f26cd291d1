"""Recorded GPU figures inside chapter prose: numbers read from engine/bench/data/*.json, never typed in.

Two inline directives (app/render.py turns them into HTML):

    {recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms}    one number, formatted: "2.41 ms"
    {recorded-source:latency}                                       where the numbers come from:
        "measured on NVIDIA H200, SmolLM2-135M-Instruct with random weights in bfloat16, recorded by
         `python -m engine bench latency`, 2026-11-26"

Every label names the model (or, for a kernel benchmark, the model's shapes) the figures were measured
with: a chapter sets SmolLM2 figures under Llama-3-8B tables, and a reader must not take one for the
other. A recorded file that names no model gives no label and no figure ("not recorded yet"), and
tests/app/test_recorded_figures.py fails on it.

A paragraph that only makes sense once a file is recorded starts with
    {recorded-if:serve-sim|Sentence shown instead until then.} The paragraph, with its figures.
`resolve_conditionals` (called by app/render.py before a chapter is rendered) keeps the paragraph
without its marker when engine/bench/data/serve-sim.json exists, and puts the fallback sentence in its
place when it does not, so a page never shows a row of "not recorded yet" where a claim should be.

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
IF_RE = re.compile(r"^\{recorded-if:(?P<name>[a-z0-9_-]+)\|(?P<fallback>[^{}]*)\}[ \t]*(?P<text>.*)$", re.M)
_SELECT_RE = re.compile(r"^(?P<key>[A-Za-z0-9_]+)(?:\[(?P<where>[^\]]+)\])?$")
NOT_YET = "not recorded yet"


class MissingFigure(LookupError):
    """The recorded file exists but holds no number at this path."""


class MissingModel(MissingFigure):
    """The recorded file does not say which model (or model shapes) its figures were measured with."""


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


def _describe(name, weights, dtype) -> str:
    # No parentheses: the label itself sits inside a chapter's parentheses.
    return f"{name}{f' with {weights} weights' if weights else ''}{f' in {dtype}' if dtype else ''}"


def model_of(rec: dict) -> str:
    """The model a recorded file's figures belong to, as the file says it: "SmolLM2-135M-Instruct with
    random weights in bfloat16". Newer records carry a top-level "model" (engine/bench/bench_env.py's
    model_record); older ones name it in their results or their workload; the kernel benchmark names
    the attention shapes it ran ("SmolLM2 attention shapes (9 q heads, ...)"). Raises MissingModel."""
    res = rec.get("results") if isinstance(rec.get("results"), dict) else {}
    model = rec.get("model")
    if isinstance(model, dict) and model.get("name"):
        return _describe(model["name"], model.get("weights"), model.get("dtype"))
    for where in (res, res.get("workload") if isinstance(res.get("workload"), dict) else {}):
        if isinstance(where.get("model"), str) and where["model"]:
            return _describe(where["model"], where.get("weights"), where.get("dtype"))
    shapes = re.search(r"\b([\w.-]+ attention shapes) \(([^)]*)\)", str(res.get("what", "")))
    if shapes:
        return f"{shapes[1]}: {shapes[2]}"
    raise MissingModel(f"recorded file {rec.get('name')!r} names no model: its figures cannot be attributed")


def source_label(rec: dict) -> str:
    return f"measured on {rec['device']}, {model_of(rec)}, recorded by `{rec['command']}`, {rec['date']}"


def figure(name: str, path: str, fmt: str | None = None) -> tuple[str, str | None]:
    """(text, label): the formatted number and where it comes from, or ("not recorded yet", None)."""
    rec = load_recorded(name)
    if rec is None:
        return NOT_YET, None
    label = source_label(rec)                   # raises MissingModel first: no figure without its model
    return format_value(lookup(rec["results"], path), fmt), label


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
    try:
        label = source_label(rec) if rec is not None else None
    except MissingModel:
        rec = None                              # a page never breaks on data; the tests catch the file
    if rec is None:
        return (f'<span class="recorded-missing">not recorded yet (a GPU run of '
                f'<code>python -m engine bench {html.escape(name)} --record</code> fills these in)</span>')
    label = html.escape(label).split("`")
    inner = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(label))
    return f'<span class="recorded-source">{inner}</span>'


def resolve_conditionals(body: str) -> str:
    """A chapter body with each `{recorded-if:NAME|fallback}` paragraph resolved (see the module docstring):
    the paragraph when NAME is recorded (and names its model), else the fallback sentence."""
    def one(m: re.Match) -> str:
        try:
            rec = load_recorded(m["name"])
            ok = rec is not None and bool(model_of(rec))
        except MissingModel:
            ok = False
        return m["text"] if ok else m["fallback"].strip()
    return IF_RE.sub(one, body)
