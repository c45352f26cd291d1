"""Accessibility and page-speed audit: `python -m app.audit` starts `panel serve app`, opens every page
(the cover, the glossary and the 21 chapters) in Debian's Chromium, light and dark, runs axe-core in
each (it reads the open shadow roots Bokeh renders into), and prints JSON: violations counted by
impact (nodes) and by rule, per page and in total.

    python -m app.audit                                  # every page, light and dark
    python -m app.audit --pages tokens,kv-cache --themes dark --details   # with each node's selector
    python -m app.audit --base http://localhost:5006/app # audit a server that is already running
    python -m app.audit --lighthouse --pages cover,tokens,paged-attention   # Lighthouse desktop scores too

axe-core is found, in order: in the PyPI package `axe-playwright-python` (the `test` extra; it bundles
axe.min.js), at $AXE_CORE_JS, then in an npm folder ($AUDIT_NODE_PREFIX, build/node, the checkout, npm's
global root: `npm install --prefix build/node axe-core`). Lighthouse (`--lighthouse`) runs the
`lighthouse` of the same npm folders (`npm install --prefix build/node lighthouse`), else
`npx lighthouse`, with CHROME_PATH=/usr/bin/chromium.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.loadtest import CHROMIUM_ARGS, _port

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
NODE_DIRS = ([Path(os.environ["AUDIT_NODE_PREFIX"])] if os.environ.get("AUDIT_NODE_PREFIX") else []) + [
    ROOT / "build" / "node", ROOT]
IMPACTS = ("critical", "serious", "moderate", "minor")
# WCAG 2.0/2.1/2.2 A and AA plus axe's best practices (landmarks, headings, region).
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


def axe_source() -> Path | None:
    """axe.min.js: from the PyPI package axe-playwright-python, else $AXE_CORE_JS, else an npm folder
    (build/node, the checkout's node_modules, npm's global root)."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("axe_playwright_python")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "axe.min.js"
        if bundled.is_file():
            return bundled
    env = os.environ.get("AXE_CORE_JS")
    if env:
        return Path(env) if Path(env).is_file() else None
    candidates = [d / "node_modules" / "axe-core" / "axe.min.js" for d in NODE_DIRS]
    if shutil.which("npm"):
        try:
            root = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, timeout=20).stdout.strip()
            if root:
                candidates.append(Path(root) / "axe-core" / "axe.min.js")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return next((c for c in candidates if c.is_file()), None)


def page_queries() -> list[tuple[str, str]]:
    from app.content import list_chapters
    pages = [("cover", ""), ("glossary", "?page=glossary")]
    return pages + [(c.slug, f"?chapter={c.slug}") for c in list_chapters()]


def wait_settled(page, timeout_ms: int = 30_000) -> None:
    """The page has rendered (the pre-painted text swapped for the live page) and no widget is still
    loading or computing its first result (or the time is up: axe then reads what is there)."""
    page.wait_for_selector("#ex-preview", state="detached", timeout=timeout_ms)
    page.wait_for_selector(".ex-main h1", state="visible", timeout=timeout_ms)
    try:
        page.wait_for_function(
            """() => {
              const states = [];
              const walk = (root) => { for (const el of root.querySelectorAll('*')) {
                  if (el.classList && el.classList.contains('w-status')) states.push(el.dataset.state);
                  if (el.shadowRoot) walk(el.shadowRoot); } };
              walk(document);
              return !states.some((s) => s === 'loading' || s === 'busy');
            }""", timeout=timeout_ms, polling=250)
    except Exception:       # a widget still busy: audit the page as it stands
        pass
    page.wait_for_timeout(300)   # Bokeh's last layout pass after the final update


def run_axe(page, axe_js: str, details: bool = False) -> dict:
    page.add_script_tag(content=axe_js)
    res = page.evaluate("""async (tags) => {
        const r = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => ({target: n.target, html: n.html.slice(0, 200),
                                      summary: (n.failureSummary || '').slice(0, 300)}))}));
    }""", TAGS)
    out = {"by_impact": {k: 0 for k in IMPACTS}, "by_rule": {}}
    for v in res:
        n = len(v["nodes"])
        out["by_impact"][v["impact"] or "minor"] += n
        out["by_rule"][v["id"]] = {"impact": v["impact"], "nodes": n, "help": v["help"]}
        if details:
            out["by_rule"][v["id"]]["examples"] = v["nodes"][:8]
    return out


def audit(base: str, pages: list[tuple[str, str]], themes: list[str], details: bool = False) -> dict:
    src = axe_source()
    if src is None:
        raise SystemExit("axe-core not found: pip install axe-playwright-python (the `test` extra), or "
                         "npm install --prefix build/node axe-core, or set AXE_CORE_JS to an axe.min.js")
    from playwright.sync_api import sync_playwright
    axe_js = src.read_text()
    results, totals, rules = [], {k: 0 for k in IMPACTS}, {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for name, query in pages:
                for theme in themes:
                    q = query + (("&" if query else "?") + "theme=dark" if theme == "dark" else "")
                    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
                    page = ctx.new_page()
                    t0 = time.perf_counter()
                    try:
                        page.goto(base + q)
                        wait_settled(page)
                        r = run_axe(page, axe_js, details)
                    except Exception as exc:       # one broken page is reported, the audit goes on
                        r = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                    finally:
                        ctx.close()
                    r.update(page=name, theme=theme, seconds=round(time.perf_counter() - t0, 1))
                    results.append(r)
                    for k, v in r.get("by_impact", {}).items():
                        totals[k] += v
                    for rule, v in r.get("by_rule", {}).items():
                        agg = rules.setdefault(rule, {"impact": v["impact"], "nodes": 0, "pages": 0})
                        agg["nodes"] += v["nodes"]
                        agg["pages"] += 1
        finally:
            browser.close()
    return {"axe_core": f"{_axe_version(src)} ({src})", "tags": TAGS, "total_by_impact": totals,
            "total_by_rule": dict(sorted(rules.items(), key=lambda kv: IMPACTS.index(kv[1]["impact"] or "minor"))),
            "pages": results}


def _axe_version(src: Path) -> str:
    """The version in axe.min.js's banner (`/*! axe v4.12.1`)."""
    import re
    with open(src, encoding="utf-8") as f:
        m = re.search(r"axe v([0-9][^\s*]*)", f.read(200))
    return m.group(1) if m else "?"


def lighthouse(base: str, pages: list[tuple[str, str]]) -> list[dict]:
    """Lighthouse desktop (simulated throttling) per page: the four category scores, FCP, LCP, TBT,
    CLS, speed index and the bytes transferred."""
    npx = shutil.which("npx")
    if npx is None:
        raise SystemExit("npx not found: install Node.js and npm")
    cwd = next((d for d in NODE_DIRS if (d / "node_modules" / ".bin" / "lighthouse").exists()), None)
    cmd = [str(cwd / "node_modules" / ".bin" / "lighthouse")] if cwd else [npx, "--yes", "lighthouse"]
    out = []
    for name, query in pages:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "lh.json"
            proc = subprocess.run(cmd + [base + query, "--preset=desktop", "--output=json", f"--output-path={path}",
                                         "--quiet", "--chrome-flags=--headless --no-sandbox --disable-gpu"],
                                  env={**os.environ, "CHROME_PATH": CHROMIUM}, capture_output=True, text=True,
                                  timeout=300)
            if not path.exists():
                out.append({"page": name, "error": proc.stderr[-300:]})
                continue
            r = json.loads(path.read_text())
        a = r["audits"]
        out.append({"page": name, **{k: round(v["score"] * 100) for k, v in r["categories"].items()},
                    "fcp_ms": round(a["first-contentful-paint"]["numericValue"]),
                    "lcp_ms": round(a["largest-contentful-paint"]["numericValue"]),
                    "speed_index_ms": round(a["speed-index"]["numericValue"]),
                    "tbt_ms": round(a["total-blocking-time"]["numericValue"]),
                    "cls": round(a["cumulative-layout-shift"]["numericValue"], 3),
                    "bytes": round(a["total-byte-weight"]["numericValue"]),
                    "failed_accessibility": [ref["id"] for ref in r["categories"]["accessibility"]["auditRefs"]
                                             if a[ref["id"]].get("score") is not None and a[ref["id"]]["score"] < 1]})
    return out


def _serve() -> tuple[subprocess.Popen, str, object]:
    import urllib.request
    port = _port()
    log = tempfile.NamedTemporaryFile("w", prefix="audit-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "panel", "serve", "app", "--port", str(port)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://localhost:{port}/app"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"panel serve exited with code {proc.returncode} (log: {log.name})")
        try:
            with urllib.request.urlopen(base, timeout=2):
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.terminate()
                raise SystemExit(f"the server did not answer in 120 s (log: {log.name})")
            time.sleep(0.3)
    return proc, base, log


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", default="all", help="comma-separated: cover, glossary or chapter slugs (all)")
    ap.add_argument("--themes", default="light,dark")
    ap.add_argument("--base", help="a running server's app URL (default: start one)")
    ap.add_argument("--details", action="store_true", help="up to 8 failing nodes per rule")
    ap.add_argument("--lighthouse", action="store_true", help="also run Lighthouse desktop on the pages")
    ap.add_argument("--no-axe", action="store_true", help="Lighthouse only")
    args = ap.parse_args(argv)
    pages = page_queries()
    if args.pages != "all":
        wanted = [s.strip() for s in args.pages.split(",") if s.strip()]
        known = dict(pages)
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise SystemExit(f"unknown pages: {unknown}")
        pages = [(w, known[w]) for w in wanted]
    themes = [t.strip() for t in args.themes.split(",") if t.strip()]
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set CHROMIUM)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        raise SystemExit("playwright is not installed: pip install -e '.[test]'") from None
    if not args.no_axe and axe_source() is None:
        raise SystemExit("axe-core not found: pip install axe-playwright-python (the `test` extra), or "
                         "npm install --prefix build/node axe-core, or set AXE_CORE_JS to an axe.min.js")
    proc = log = None
    base = args.base
    if base is None:
        proc, base, log = _serve()
    try:
        report: dict = {}
        if not args.no_axe:
            report.update(audit(base, pages, themes, args.details))
        if args.lighthouse:
            report["lighthouse"] = lighthouse(base, pages)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
