"""Load test: `python -m app.loadtest --readers N --seconds S` starts `panel serve app`, then N simulated
readers use it at once, and prints JSON.

* Browser readers (one in BROWSER_SHARE, at least one): headless Chromium pages that open chapter 1,
  press Generate (a short reply) and measure press -> first token on the page; then open another page.
* Websocket readers (the rest): Bokeh clients (`bokeh.client.pull_session`) that open a random chapter's
  session over the websocket, which builds every widget of that chapter on the server, and close it.

* A probe (one more client, on the server's OpenAI-compatible /v1): a streamed 24-token completion,
  three times before the readers come (quiet) and every few seconds while they are there (under load),
  timing its first token and the delay between tokens. Each token of one stream is one engine step, so
  1000 / delay is the engine's decode steps per second as a reader's reply sees them.

JSON: what a reader feels (browser: page to widget live, press to first token; websocket: a whole page's
session; the probe's first token and per-token delay, quiet and under load, and the steps/s ratio),
errors, the server's memory (RSS) before, at its peak during, and after everyone left, the engine's KV
blocks in use after everyone left, and the engine's steps and tokens served during the run (from the
server's /engine.json), and how many periodic [engine] lines the server's console printed (its log
file is named in the JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSER_SHARE = 5
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read()) if url.endswith(".json") else r.status


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)


def client_models() -> None:
    """Define every Bokeh model a chapter's page may hold in this process, so a websocket client can read
    the page: Panel's own, and our components (the Stepper), which importing every widget defines once."""
    import panel.models  # noqa: F401

    from widgets.common.registry import registry
    registry()


class Run:
    def __init__(self, base: str, deadline: float, slugs: list[str]):
        self.base, self.deadline, self.slugs = base, deadline, slugs
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {"browser_widget_live": [], "browser_first_token": [],
                                              "websocket_session": [], "probe_first_token": [],
                                              "probe_token_delay": []}
        self.errors: list[str] = []

    def record(self, kind: str, ms: float) -> None:
        with self.lock:
            self.times[kind].append(ms)

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what[:200])

    def websocket_reader(self) -> None:
        client_models()
        from bokeh.client import pull_session
        while time.monotonic() < self.deadline:
            slug = random.choice(self.slugs)
            t0 = time.perf_counter()
            try:
                with pull_session(url=f"{self.base}/app", arguments={"chapter": slug}) as session:
                    if not session.document.roots:
                        self.error(f"websocket {slug}: empty document")
                        continue
                self.record("websocket_session", 1000 * (time.perf_counter() - t0))
            except Exception as exc:
                self.error(f"websocket {slug}: {type(exc).__name__}: {exc}")


PROBE_TOKENS = 24


def probe(base: str) -> tuple[float, float]:
    """One streamed completion on /v1: (ms to its first token, median ms between its tokens)."""
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        models = json.loads(r.read())
    body = json.dumps({"model": models["data"][0]["id"], "prompt": "The history of the river is", "stream": True,
                       "max_tokens": PROBE_TOKENS, "temperature": 0, "ignore_eos": True,
                       "logprobs": 1}).encode()      # a chunk per token, even one whose text is empty
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0, stamps = time.perf_counter(), []
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            if line.startswith(b"data: {"):
                stamps.append(time.perf_counter())
    if len(stamps) < 2:
        raise RuntimeError(f"the probe got {len(stamps)} tokens")
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    return 1000 * (stamps[0] - t0), 1000 * gaps[len(gaps) // 2]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readers", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--random-weights", action="store_true", help="mechanics only (no model file)")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    args = ap.parse_args(argv)
    port = _port()
    env = {**os.environ, **({"LLM_EXPLAINER_RANDOM_WEIGHTS": "1"} if args.random_weights else {})}
    # The server's console goes to a file: the run counts its periodic [engine] lines (what an operator sees).
    log_path = ROOT / "artifacts" / "loadtest-server.log"
    if not log_path.parent.is_dir():
        log_path = Path(tempfile.mkdtemp()) / "loadtest-server.log"
    log = open(log_path, "w")
    server = subprocess.Popen([sys.executable, "-m", "panel", "serve", "app", "--port", str(port), "--liveness"],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://localhost:{port}"
    try:
        for _ in range(600):
            try:
                if _get(base + "/engine.json").get("status") == "ready":
                    break
            except OSError:
                pass
            time.sleep(0.5)                       # polling the server until its engine is ready
        sys.path.insert(0, str(ROOT))
        from app.content import list_chapters
        slugs = [c.slug for c in list_chapters()]
        quiet = [probe(base) for _ in range(3)]        # the engine alone: the reference for "under load"
        start = _get(base + "/engine.json")
        mem_before = _rss_mb(server.pid)
        n_browser = max(1, args.readers // BROWSER_SHARE) if args.readers else 0
        run = Run(base, time.monotonic() + args.seconds, slugs)
        threads = [threading.Thread(target=run.websocket_reader, daemon=True)
                   for _ in range(args.readers - n_browser)]
        peak = [mem_before]
        stop = threading.Event()

        def watch_memory():
            while not stop.wait(0.5):
                peak[0] = max(peak[0], _rss_mb(server.pid))
        threading.Thread(target=watch_memory, daemon=True).start()

        def browsers():
            # Playwright's sync API lives on one thread: the browser readers take turns on it, each
            # in a context of its own, overlapping through the server's concurrency.
            from playwright.sync_api import sync_playwright
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
                _browser_round_robin(run, b, n_browser)
                b.close()
        bt = threading.Thread(target=browsers, daemon=True)

        def probes():
            while time.monotonic() < run.deadline and not stop.wait(2.0):
                try:
                    first, delay = probe(base)
                    run.record("probe_first_token", first)
                    run.record("probe_token_delay", delay)
                except Exception as exc:
                    run.error(f"probe: {type(exc).__name__}: {exc}")
        pt = threading.Thread(target=probes, daemon=True)
        for t in threads:
            t.start()
        bt.start()
        pt.start()
        for t in threads + [bt, pt]:
            t.join(args.seconds + 600)
        stop.set()
        deadline = time.monotonic() + 60
        end = _get(base + "/engine.json")
        while (end["running"] or end["waiting"] or end["kv_blocks_used"]) and time.monotonic() < deadline:
            time.sleep(0.5)                       # polling: every reader has left, the engine drains
            end = _get(base + "/engine.json")
        mem_after = _rss_mb(server.pid)
        result = {
            "readers": args.readers, "browser_readers": n_browser, "seconds": args.seconds,
            "random_weights": args.random_weights,
            "widget_response_ms": {k: {"n": len(v), "p50": _pct(v, 0.5), "p99": _pct(v, 0.99)}
                                   for k, v in run.times.items()},
            "probe_quiet_ms": {"first_token": round(sorted(q[0] for q in quiet)[1], 1),
                               "token_delay": round(sorted(q[1] for q in quiet)[1], 1)},
            "decode_steps_per_s": _steps_per_s(quiet, run.times["probe_token_delay"]),
            "errors": len(run.errors), "error_samples": run.errors[:5],
            "server_rss_mb": {"before": round(mem_before), "peak_during": round(peak[0]), "after": round(mem_after)},
            "kv_blocks_in_use_after": end["kv_blocks_used"], "kv_blocks": end["kv_blocks"],
            "engine_steps": end["steps"] - start["steps"], "engine_tokens": end["tokens"] - start["tokens"],
            "engine_generated_tokens": end["generated"] - start["generated"], "engine_alive": end["alive"],
        }
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    result["server_exit_code"] = server.returncode
    log.close()
    result["server_engine_log_lines"] = sum("[engine]" in line and "sessions" in line
                                            for line in log_path.read_text(errors="replace").splitlines())
    result["server_log"] = str(log_path)
    print(json.dumps(result, indent=2))
    return result


def _steps_per_s(quiet: list[tuple[float, float]], loaded_delays: list[float]) -> dict:
    """Decode steps per second a reply sees (1000 / its median per-token delay), quiet and under load."""
    q = 1000 / sorted(d for _, d in quiet)[len(quiet) // 2]
    if not loaded_delays:
        return {"quiet": round(q, 1), "under_load": None, "kept": None}
    loaded = 1000 / sorted(loaded_delays)[len(loaded_delays) // 2]
    return {"quiet": round(q, 1), "under_load": round(loaded, 1), "kept": round(loaded / q, 2)}


def _browser_round_robin(run: Run, browser, n: int) -> None:
    """n browser readers on one Playwright thread: each step advances every reader's page a little."""
    while time.monotonic() < run.deadline:
        ctxs = [browser.new_context(viewport={"width": 1280, "height": 900}) for _ in range(n)]
        try:
            pages = [c.new_page() for c in ctxs]
            opened = []
            for p in pages:
                opened.append(time.perf_counter())
                p.goto(f"{run.base}/app?chapter=what-is-an-llm", timeout=120_000, wait_until="commit")
            for p, t0 in zip(pages, opened):
                p.wait_for_selector('.widget-generate .w-status[data-state="live"]', timeout=300_000)
                run.record("browser_widget_live", 1000 * (time.perf_counter() - t0))
                p.locator(".widget-generate .gen-max-tokens input").fill("8")
                p.locator(".widget-generate .gen-max-tokens input").press("Tab")
            starts = []
            for p in pages:
                starts.append(time.perf_counter())
                p.locator(".widget-generate .gen-button button").click()
            for p, t0 in zip(pages, starts):
                p.wait_for_selector(".widget-generate .gen-out .tok >> nth=0", timeout=300_000)
                run.record("browser_first_token", 1000 * (time.perf_counter() - t0))
            for p in pages:
                p.wait_for_selector(".widget-generate .gen-stats :text('stopped')", timeout=300_000)
        except Exception as exc:
            run.error(f"browser: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        finally:
            for c in ctxs:
                c.close()


if __name__ == "__main__":
    main()
