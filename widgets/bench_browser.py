"""The widgets as a reader's browser sees them: ``python -m widgets.bench_browser`` prints JSON.

Starts `panel serve app` on a free port, drives Debian's Chromium with Playwright, and measures
(widgets/README.md, point 6; targets: first paint within 1 s, tokenizer under 150 ms for 2,000 characters):

    first_paint   from navigation start to the first frame showing each widget's content
                  (its saved example: the page never waits for the model)
    tokenizer     from a keystroke in a 2,000-character text to the frame that shows the new counts
    embeddings    from a keystroke in the first word box to the frame that shows the new cosine
    attention     from a keystroke in chapter 4's sentence (about 60 tokens) to the frame whose sentence
                  strip shows it: debounce, one inspect pass, the heatmap (target: under 500 ms)

Times come from the page's own clock (``performance.now()``), checked every animation frame.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

# A frame loop that records when a selector first matches anywhere in the page, shadow roots included.
_WATCH = """window.__seen = {}; window.__watch = (name, sel, text) => {
  const find = (root) => { for (const el of root.querySelectorAll(sel)) if (!text || el.textContent.includes(text)) return el;
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; } return null; };
  const tick = () => { if (find(document)) window.__seen[name] = performance.now(); else requestAnimationFrame(tick); };
  requestAnimationFrame(tick); };"""
_FIRST = """(() => { %s
  for (const [n, s] of [["generate", ".gen-out .tok"], ["tokenizer", ".tk-out .tk"], ["embeddings", ".emb-cos-value"],
                        ["prefill-decode", ".pd-tab .pd-ttft"], ["kv-cache", ".kv-chip"],
                        ["attention-heatmap", ".as-strip .as-tok"], ["rope", ".rope-value"],
                        ["mlp-activations", ".mlp-table td"]])
    window.__watch(n, s); })();""" % _WATCH

_TYPE = """async ([hostSel, value, watchSel, want]) => {
  const deep = (root, sel) => { const hit = root.querySelector(sel); if (hit) return hit;
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = deep(el.shadowRoot, sel); if (f) return f; } return null; };
  const host = deep(document, hostSel); const box = (host.shadowRoot || host).querySelector('textarea, input');
  window.__seen = {}; window.__watch('typed', watchSel, want);
  const t0 = performance.now();
  box.value = value; box.dispatchEvent(new Event('input', {bubbles: true, composed: true}));
  while (!window.__seen.typed) await new Promise((r) => requestAnimationFrame(r));
  return window.__seen.typed - t0; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stats(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"median_ms": round(statistics.median(ms), 1), "max_ms": round(ms[-1], 1), "runs": len(ms)}


def run(repeat: int = 10) -> dict:
    from playwright.sync_api import sync_playwright

    from widgets.tokenizer.compute import text_of
    from widgets.common.testing import wait_live

    port = _free_port()
    base = f"http://localhost:{port}/app"
    server = subprocess.Popen([sys.executable, "-m", "panel", "serve", "app", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):                  # until the server answers (polling a condition)
            try:
                urllib.request.urlopen(base, timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        out: dict = {"first_paint": {}, "tokenizer": [], "embeddings": [], "attention": []}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.add_init_script(_FIRST)
            firsts: dict[str, list[float]] = {}
            for _ in range(max(3, repeat // 3)):
                for slug, name in (("what-is-an-llm", "generate"), ("tokens", "tokenizer"), ("embeddings", "embeddings"),
                                   ("prefill-and-decode", "prefill-decode"), ("kv-cache", "kv-cache"),
                                   ("attention", "attention-heatmap"), ("positional-encoding", "rope"),
                                   ("mlp-block", "mlp-activations")):
                    page.goto(f"{base}?chapter={slug}")
                    page.wait_for_function(f"() => window.__seen && window.__seen['{name}']", timeout=60_000)
                    firsts.setdefault(name, []).append(page.evaluate(f"() => window.__seen['{name}']"))
            out["first_paint"] = {n: _stats(v) for n, v in firsts.items()}
            page.goto(f"{base}?chapter=tokens")
            wait_live(page, "tokenizer")
            for i in range(repeat):
                mark = f" zq{i}x"             # each text ends differently: the frame that shows it is the new one
                text = text_of(2000 - len(mark)) + mark
                out["tokenizer"].append(page.evaluate(_TYPE, [".sentence-source", text,
                                                              '.tk-col[data-tokenizer="g"] .tk-out', mark.strip()]))
            page.goto(f"{base}?chapter=embeddings")
            wait_live(page, "embeddings")
            for i, word in enumerate(["dog", "cat", "horse", "king", "queen", "river", "music", "seven"] * repeat):
                if i == repeat:
                    break
                out["embeddings"].append(page.evaluate(_TYPE, [".emb-a", word, ".emb-cos", f"“␣{word}”"]))
            page.goto(f"{base}?chapter=attention")
            wait_live(page, "attention-heatmap")
            words = "the river bank was quiet after the storm and the boats".split()
            for i in range(repeat):
                mark = f" zq{i}x"
                text = " ".join(words[j % len(words)] for j in range(52)) + mark       # about 60 tokens
                out["attention"].append(page.evaluate(_TYPE, [".ah-input", text, ".as-strip", mark.strip()]))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"bench": "widgets-browser", "command": "python -m widgets.bench_browser", "date": _dt.date.today().isoformat(),
            "browser": "Chromium (headless, Playwright)", "server": "panel serve app on this machine",
            "unit": "ms on the page's clock (median, max)",
            "results": {"first_paint": out["first_paint"],
                        "tokenizer_2000_chars_keystroke_to_paint": _stats(out["tokenizer"]),
                        "embeddings_keystroke_to_paint": _stats(out["embeddings"]),
                        "attention_heatmap_keystroke_to_paint": _stats(out["attention"])},
            "targets": {"first_paint_ms": 1000, "tokenizer_ms": 150, "heatmap_ms": 500}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m widgets.bench_browser", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="keystrokes timed per widget (default 10)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
