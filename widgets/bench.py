"""Server time per update of the widgets, on this machine: ``python -m widgets.bench`` prints JSON.

What one reader's input change costs the server (WIDGETS.md, point 7), measured without a browser:

    tokenizer     2,000 characters through each tokenizer: encode, place the spans, render the HTML
                  (target: under 50 ms)
    neighbours    one word's ten nearest rows among all 49,152 (the table's row lengths cached, as in
                  the widget after its first query)
    pca_map       the word vectors of the four sets, PCA, and the points handed to the Bokeh sources
    embeddings    everything the explorer recomputes on one change (cosine, neighbours, map, facts):
                  the widget runs all of it as one job
    and every widget module's own ``bench(llm)``: attention_heatmap (a new 64-token sentence: one
                  inspect pass and all its figures, target under 300 ms; another layer, head or row),
                  rope (a slider move), mlp_activations (a new sentence; another layer, token or neuron),
                  prefill-decode (a roofline update; one measuring run of 16 and 64 prompt tokens),
                  kv-cache (a new private engine with the prompt prefilled, and one Step beside a
                  recompute of the whole sequence), parallelism (the split and modelled views;
                  one real tp=3 run of 4 tokens on CPU processes, where spawning them and loading a
                  shard dominates), forward_pass, sampler, data_flow, ...

Each figure is the median (and 90th percentile) of ``--repeat`` runs after two warm-up runs, in
milliseconds, with the device named as the labels name it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys

from widgets.common.timing import timed

LIGHT_TARGET_MS = 300
TOKENIZER_TARGET_MS = 50


def _time(fn, repeat: int) -> dict:
    return {**timed(fn, repeat, warmup=2), "runs": repeat}


def text_of(length: int) -> str:
    """Prose, technical text and code in turn, cut to ``length`` characters."""
    from widgets.tokenizer import SAMPLES
    mixed = "\n".join(SAMPLES.values())
    return (mixed * (length // len(mixed) + 1))[:length]


def module_benches(llm, only: list[str] | None = None) -> dict:
    """Every widget module's own ``bench(llm) -> dict`` (ms per update of its heavy operations), by
    module name: a widget that defines one appears here without editing this file. ``only`` names
    the modules to run (a slow machine, or one widget's figures)."""
    from widgets.common.registry import registry
    registry()
    out = {}
    for name, module in sorted(sys.modules.items()):
        if name.startswith("widgets.") and name.count(".") == 1 and callable(getattr(module, "bench", None)):
            if only and name.split(".", 1)[1] not in only:
                continue
            key, res = name.split(".", 1)[1], module.bench(llm)
            out[key] = res[key] if set(res) == {key} else res     # some modules nest under their own name
    return out


def run(repeat: int = 30, chars: int = 2000, only: list[str] | None = None) -> dict:
    from engine import LLM
    from widgets.embedding_space import nearest, word_vector
    from widgets.embedding_view import EmbeddingMap
    from widgets.embeddings import OWN, WORD_SETS, Inputs, compute
    from widgets.token_spans import render, tokenize
    from widgets.tokenizer import TOKENIZERS

    llm = LLM(device="cpu")
    if only:                                   # just the named modules' own benches
        return {"bench": "widgets", "command": "python -m widgets.bench --only " + " ".join(only),
                "device": llm.device_name, "date": _dt.date.today().isoformat(),
                "unit": "ms of server time per update", "results": module_benches(llm, only)}
    text = text_of(chars)
    results: dict = {"tokenizer": {}}
    for key in TOKENIZERS:
        tok = llm.tokenizers.get(key)
        timing = _time(lambda: render(tokenize(tok, text), key, False), repeat)
        results["tokenizer"][tok.name] = {**timing, "characters": len(text), "tokens": len(tok.encode(text).ids)}
    both = _time(lambda: [render(tokenize(llm.tokenizers.get(k), text), k, False) for k in TOKENIZERS], repeat)
    results["tokenizer"]["both, as one update"] = {**both, "characters": len(text)}

    query = word_vector(llm, "king")
    results["neighbours"] = _time(lambda: nearest(llm, query), repeat)
    fig = EmbeddingMap([*WORD_SETS, OWN])
    only_map = Inputs(word_a="", word_b="", near="")          # empty words: compute() skips those parts
    results["pca_map"] = {**_time(lambda: fig.show(compute(llm, only_map)["map"]), repeat),
                          "words": len(compute(llm, only_map)["map"]["points"])}
    results["embeddings"] = _time(lambda: fig.show(compute(llm, Inputs())["map"]), repeat)
    results.update(module_benches(llm))
    llm.close()
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
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per figure (default 30)")
    parser.add_argument("--chars", type=int, default=2000, help="characters of text for the tokenizer (default 2000)")
    parser.add_argument("--only", nargs="+", metavar="MODULE",
                        help="run only these widget modules' bench(llm), e.g. --only prefix_cache chunked_prefill")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat, args.chars, args.only), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
