"""Server time per update of the widgets, on this machine: ``python -m widgets.bench`` prints JSON.

What one reader's input change costs the server (widgets/README.md, point 6), measured without a
browser: every widget's own ``bench(llm)`` (in its widget.py), for example

    tokenizer     2,000 characters through each tokenizer: encode, place the spans, render the HTML
                  (target: under 50 ms)
    embeddings    one word's ten nearest rows among all 49,152 (neighbours); the word vectors of the four
                  sets, PCA and the points handed to the Bokeh sources (pca_map); everything the explorer
                  recomputes on one change (embeddings)
    attention_heatmap (a new 64-token sentence: one inspect pass and all its figures, target under
                  300 ms; another layer, head or row), rope (a slider move), mlp_activations (a new
                  sentence; another layer, token or neuron), prefill_decode (a roofline update; one
                  measuring run of 16 and 64 prompt tokens), kv_cache (a new private engine with the prompt
                  prefilled, and one Step beside a recompute of the whole sequence), parallelism (the split
                  and modelled views; one real tp=3 run of 4 tokens on CPU processes, where spawning them
                  and loading a shard dominates), forward_pass, sampler, data_flow, ...

Figures are medians (with a 90th percentile or a maximum) of a few runs, in milliseconds, with the
device named as the labels name it. ``--repeat`` and ``--chars`` go to every bench that takes them.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import sys

LIGHT_TARGET_MS = 300
TOKENIZER_TARGET_MS = 50


def module_benches(llm, only: list[str] | None = None, **options) -> dict:
    """Every widget's own ``bench(llm) -> dict`` (ms per update of its heavy operations), by folder
    name: a widget that defines one appears here without editing this file. ``only`` names the widgets
    to run (a slow machine, or one widget's figures); ``options`` (``repeat=``, ``chars=``) go to each
    bench that takes an argument of that name, and the others keep their own."""
    from widgets.common.registry import registry
    registry()
    out = {}
    for name, module in sorted(sys.modules.items()):
        parts = name.split(".")
        in_folder = len(parts) == 3 and parts[2] == "widget"          # widgets/<folder>/widget.py
        if parts[0] == "widgets" and (in_folder or len(parts) == 2) and callable(getattr(module, "bench", None)):
            key = parts[1]
            if only and key not in only:
                continue
            takes = inspect.signature(module.bench).parameters
            res = module.bench(llm, **{k: v for k, v in options.items() if k in takes and v is not None})
            out[key] = res[key] if set(res) == {key} else res     # some modules nest under their own name
    return out


def run(repeat: int | None = None, chars: int | None = None, only: list[str] | None = None) -> dict:
    from engine import LLM

    llm = LLM(device="cpu")
    results = module_benches(llm, only, repeat=repeat, chars=chars)
    llm.close()
    if only:                                   # just the named widgets' own benches
        return {"bench": "widgets", "command": "python -m widgets.bench --only " + " ".join(only),
                "device": llm.device_name, "date": _dt.date.today().isoformat(),
                "unit": "ms of server time per update", "results": results}
    worst_tok = max(v["median_ms"] for v in results["tokenizer"].values())
    heatmap = results.get("attention_heatmap", {}).get("new_sentence_64_tokens", {}).get("median_ms")
    return {"bench": "widgets", "command": "python -m widgets.bench", "device": llm.device_name,
            "date": _dt.date.today().isoformat(), "unit": "ms of server time per update (median, p90)",
            "results": results,
            "targets": {"tokenizer_ms": TOKENIZER_TARGET_MS, "light_widget_ms": LIGHT_TARGET_MS,
                        "tokenizer_met": worst_tok < TOKENIZER_TARGET_MS,
                        "heatmap_64_tokens_met": None if heatmap is None else heatmap < LIGHT_TARGET_MS}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m widgets.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed runs per figure, for every bench that takes it (default: each bench's own; "
                             "30 for the tokenizer and embeddings)")
    parser.add_argument("--chars", type=int, default=None, help="characters of text for the tokenizer (default 2000)")
    parser.add_argument("--only", nargs="+", metavar="WIDGET",
                        help="run only these widgets' bench(llm), e.g. --only prefix_cache chunked_prefill")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat, args.chars, args.only), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
