"""Test helpers for widgets: saved examples against the engine, and browser checks through shadow DOM.

Unit tests:
    assert_example_fresh("tokenizer", llm)          # the saved first example equals a fresh computation
    w = MyWidget(LoadedEngine(llm)); w._runner.wait_idle(60)   # a widget built live on the real model
    assert_example_fresh("generate", llm, ignore={"prefill_s", "decode_s"})   # measured times differ
    w = MyWidget(LoadedEngine())                    # still loading: the saved example, "loading the model…"

Browser tests (Playwright; Bokeh renders every pane in a shadow root: Playwright's CSS selectors pierce
them, ``document.querySelector`` and a page's own ``textContent`` do not):
    wait_live(page, "tokenizer")                    # the widget's gate says live (fails on "failed")
    wait_text(page, ".widget-tokenizer .tk-stats", "7 tokens")
    deep_text(page, ".tk-out")                      # all text of every match, through shadow roots
    deep_count(page, ".tk-out .tk")                 # how many elements match, through shadow roots
    pts = bokeh_points(page)                        # Bokeh glyphs: data columns + page position
    hover_point(page, pts[0], "king")               # mouse onto a point, wait for its tooltip
    shots = widget_screenshots(browser, server, AppPage, "?chapter=tokens", "tokenizer")
                                                    # 1280 and 390 px, light and dark: 4 PNG paths
"""
from __future__ import annotations

import math
import re
import time
from pathlib import Path

ENGINE_READY_MS = 480_000     # a fresh CI machine downloads (~100 MB) and dequantizes the model first
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"

# A number as a page shows it: one with a decimal point, or a percentage, is a rounded float.
_SHOWN_NUMBER = re.compile(r"[-+]?\d[\d,]*\.\d+|[-+]?\d+(?=%)")


def _same_shown(a: str, b: str) -> bool:
    """Two pieces of display text that differ only where a rounded number lands one unit of its last digit
    apart: the floats behind them are equal to within the arithmetic, rounded on either side of a midpoint.
    Words, token ids and counts (integers without a '%') must be equal."""
    if _SHOWN_NUMBER.sub("#", a) != _SHOWN_NUMBER.sub("#", b):
        return False
    for x, y in zip(_SHOWN_NUMBER.findall(a), _SHOWN_NUMBER.findall(b)):
        unit = 10.0 ** -len(x.split(".")[1]) if "." in x else 1.0
        if "." in x and "." in y and len(x.split(".")[1]) != len(y.split(".")[1]):
            return False
        if abs(float(x.replace(",", "")) - float(y.replace(",", ""))) > unit * 1.0001:
            return False
    return True


def same(a, b, rel: float = 1e-3, ignore: frozenset | set = frozenset(), path: str = "",
         ranks: frozenset | set = frozenset()) -> list[str]:
    """Differences between two JSON-like values: floats compared with a relative tolerance, display text up to
    one unit in a rounded number's last digit (``_same_shown``), and the integers under a key in ``ranks``
    (a token's rank among the whole vocabulary) within max(2, 1%): tokens whose logits lie within float32
    drift of the ranked one (~1e-4 after 30 layers, on another CPU) may count on either side of it, and far
    down the ranking thousands of logits crowd together."""
    if isinstance(a, dict) and isinstance(b, dict):
        diffs = []
        for key in sorted(set(a) | set(b)):
            if key in ignore:
                continue
            if key not in a or key not in b:
                diffs.append(f"{path}/{key}: only in {'saved' if key in a else 'fresh'}")
            elif key in ranks and isinstance(a[key], int) and isinstance(b[key], int):
                if abs(a[key] - b[key]) > max(2, 0.01 * max(a[key], b[key])):
                    diffs.append(f"{path}/{key}: saved rank {a[key]}, fresh {b[key]}")
            else:
                diffs += same(a[key], b[key], rel, ignore, f"{path}/{key}", ranks)
        return diffs
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items saved, {len(b)} fresh"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, rel, ignore, f"{path}[{i}]", ranks)]
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=rel, abs_tol=rel)
        return [] if ok else [f"{path}: saved {a!r}, fresh {b!r}"]
    if isinstance(a, str) and isinstance(b, str) and a != b and _same_shown(a, b):
        return []
    return [] if a == b else [f"{path}: saved {a!r}, fresh {b!r}"]


def assert_example_fresh(name: str, llm, ignore: set[str] | frozenset = frozenset(), rel: float = 1e-3,
                         ranks: set[str] | frozenset = frozenset()) -> None:
    """The saved example ``name`` equals what the engine computes now (keys in ``ignore`` skipped; ``ranks``:
    see ``same``)."""
    from widgets.common.examples import command, compute_example, load_example
    saved = load_example(name)
    assert saved is not None, f"no saved example {name!r}: run `{command(name)}`"
    diffs = same(saved.data, compute_example(name, llm), rel, frozenset(ignore), ranks=frozenset(ranks))
    assert not diffs, f"saved example {name!r} is stale (run `{command(name)}`):\n" + "\n".join(diffs[:20])


class LoadedEngine:
    """An engine handle whose model is already loaded (the app's handle, for unit tests of a widget
    on the real ``llm``): the widget's gate goes live at once and its jobs run on the real model."""

    def __init__(self, llm=None):
        self.llm = llm            # None: a handle still loading, so the widget shows only its saved example

    def start(self) -> None:
        pass

    def snapshot(self):
        from widgets.common.handle import EngineSnapshot, EngineStatus
        if self.llm is None:
            return EngineSnapshot(EngineStatus.LOADING, "", False)
        return EngineSnapshot(EngineStatus.READY, "ready", False)


# -- browser --------------------------------------------------------------------------------------
def deep_text(page, selector: str) -> str:
    """All text of every match, joined by newlines (Playwright's CSS engine pierces shadow roots, also
    between the parts of a descendant selector such as ".widget-tokenizer .tk-out")."""
    return "\n".join(page.locator(selector).all_text_contents())


def deep_count(page, selector: str) -> int:
    return page.locator(selector).count()


def wait_text(page, selector: str, contains: str, timeout_ms: int = 30_000) -> None:
    """Until some element matching ``selector`` contains ``contains`` (case-insensitive)."""
    page.locator(selector, has_text=contains).first.wait_for(state="attached", timeout=timeout_ms)


def wait_live(page, name: str, timeout_ms: int = ENGINE_READY_MS) -> None:
    """Until the widget's gate is live and idle; fails with the gate's message if the model failed."""
    sel = f'.widget-{name} .w-status[data-state="live"], .widget-{name} .w-status[data-state="failed"]'
    page.wait_for_selector(sel, timeout=timeout_ms)
    failed = page.locator(f'.widget-{name} .w-status[data-state="failed"]')
    assert failed.count() == 0, failed.first.inner_text()


# Every glyph of every Bokeh figure on the page: its data columns and its position on the page.
_BOKEH_POINTS = """() => { const out = []; const views = [];
  const visit = (v) => {
    if (v.frame && v.renderer_views) {
      const rect = v.el.getBoundingClientRect();
      views.push(v);
      for (const rv of v.renderer_views.values()) {
        const d = rv.model.data_source ? rv.model.data_source.data : null;
        if (!d || !d.x || !d.y) continue;
        for (let i = 0; i < d.x.length; i++) {
          const row = {};
          for (const k of Object.keys(d)) row[k] = d[k][i];
          row.px = rect.x + v.frame.x_scale.compute(d.x[i]);
          row.py = rect.y + v.frame.y_scale.compute(d.y[i]);
          row.plot = views.length - 1;
          out.push(row);
        }
      }
    }
    for (const c of (v.child_views || [])) visit(c);
  };
  for (const v of Object.values(Bokeh.index)) visit(v);
  window.__testPlotViews = views;
  return out; }"""


def bokeh_points(page) -> list[dict]:
    """Every plotted point (glyphs with x and y columns) of the page's Bokeh figures, as dicts of the
    source's columns plus ``px``/``py``, its position in the viewport (scroll it into view first)."""
    return page.evaluate(_BOKEH_POINTS)


def hover_point(page, point: dict, tooltip_text: str, timeout_ms: int = 30_000) -> None:
    """Move the mouse onto a point from ``bokeh_points`` until its tooltip says ``tooltip_text``.

    A hover is one event: if the figure re-rendered or moved between reading the point and moving onto it
    (on a busy machine a late update can land in between), no tooltip ever comes. So each try re-reads
    where the same point (same data columns) is now, scrolls its figure to the middle of the viewport when
    the point lies outside it (a mouse outside the viewport sends no event at all: CI saw a table grow
    above the chart and push the point below the fold), and moves off and back on."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    data = {k: v for k, v in point.items() if k not in ("px", "py", "plot")}
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        point = next((p for p in bokeh_points(page) if {k: p.get(k) for k in data} == data), point)
        size = page.viewport_size or {"width": 1280, "height": 900}
        if not (2 <= point["px"] <= size["width"] - 2 and 2 <= point["py"] <= size["height"] - 2):
            page.evaluate("i => window.__testPlotViews[i].el.scrollIntoView({block: 'center'})",
                          point.get("plot", 0))
            point = next((p for p in bokeh_points(page) if {k: p.get(k) for k in data} == data), point)
        page.mouse.move(0, 0)
        page.mouse.move(point["px"] - 4, point["py"] - 4)
        page.mouse.move(point["px"], point["py"], steps=2)
        try:
            wait_text(page, ".bk-Tooltip div", tooltip_text, 3_000)
            return
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                seen = page.locator(".bk-Tooltip div").all_text_contents()
                under = page.evaluate("([x, y]) => { const e = document.elementFromPoint(x, y); "
                                      "return e ? e.tagName + '.' + e.className : null; }",
                                      [point["px"], point["py"]])
                raise AssertionError(
                    f"no tooltip saying {tooltip_text!r} at ({point['px']:.0f}, {point['py']:.0f}) in a "
                    f"{size['width']}x{size['height']} viewport; under the mouse: {under}; tooltips "
                    f"shown: {[t[:80] for t in seen if t.strip()]}") from None


def widget_screenshots(browser, server: str, app_page_class, query: str, name: str,
                       prepare=None, tag: str | None = None) -> list[Path]:
    """Screenshots of one widget at 1280 and 390 px, light and dark, once it is live.

    ``prepare(page)`` may interact first (hover, type). Files: artifacts/screenshots/<tag>-<w>-<theme>.png
    (``tag`` defaults to the widget's name; a widget placed in two chapters needs two tags).
    Each page is also checked clean (no console errors, no request leaving localhost)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    paths = []
    for width, height in ((1280, 900), (390, 844)):
        for theme in ("light", "dark"):
            phone = width < 500
            ctx = browser.new_context(viewport={"width": width, "height": height}, is_mobile=phone,
                                      has_touch=phone, device_scale_factor=2 if phone else 1)
            try:
                ap = app_page_class(ctx.new_page(), server)
                page = ap.open(query + ("&theme=dark" if theme == "dark" else ""))
                wait_live(page, name)
                widget = page.locator(f".widget-{name}").first
                widget.scroll_into_view_if_needed()
                if prepare is not None:
                    prepare(page)
                path = SCREENSHOTS / f"{tag or name}-{width}-{theme}.png"
                widget.screenshot(path=str(path))
                overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 0, f"{name} at {width} px scrolls sideways by {overflow} px"
                ap.assert_clean()
                paths.append(path)
            finally:
                ctx.close()
    return paths
