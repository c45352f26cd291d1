"""axe-core on a few pages, light and dark: no critical and no serious violation (WCAG 2.x A/AA and
axe's best practices, as `python -m app.audit` runs it on every page). axe comes from the PyPI package
axe-playwright-python (the `test` extra), which bundles axe.min.js: no npm needed."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")
axe_package = pytest.importorskip(
    "axe_playwright_python",
    reason="axe-playwright-python is not installed (pip install -e '.[test]'): it bundles the axe-core this test runs")

from app.audit import run_axe  # noqa: E402

pytestmark = pytest.mark.ui

AXE_JS = (Path(axe_package.__file__).parent / "axe.min.js").read_text(encoding="utf-8")

# The cover (with the live engine dashboard), an early chapter (the tokenizer: text box, checkboxes,
# code), an engine chapter (the page allocator: sliders, buttons, block tables) and one with formulas.
PAGES = {"cover": "", "tokens": "?chapter=tokens", "paged-attention": "?chapter=paged-attention",
         "attention": "?chapter=attention"}

# Every widget on the page has painted (its status line or its output is there), MathJax has drawn
# every formula, and the page's naming pass (widgets.js) has run over what was drawn last.
SETTLED = """() => {
  const all = [];
  const walk = (root, sel) => { root.querySelectorAll(sel).forEach((e) => all.push(e));
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot, sel); };
  walk(document, '.ex-widget, .math-inline, .math-display');
  const widgets = all.filter((e) => e.classList.contains('ex-widget'));
  const maths = all.filter((e) => !e.classList.contains('ex-widget'));
  const painted = widgets.every((w) => (w.shadowRoot || w).querySelector('*'));
  const typeset = maths.every((m) => m.querySelector('mjx-container svg[aria-label]'));
  return painted && typeset;
}"""

NEXT_FRAME = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("name", list(PAGES))
def test_no_critical_or_serious_axe_violations(app, name, theme):
    query = PAGES[name]
    if theme == "dark":
        query += ("&" if query else "?") + "theme=dark"
    page = app.open(query)
    page.wait_for_function(SETTLED, timeout=60_000, polling=200)
    page.evaluate(NEXT_FRAME)                    # the naming pass runs on the frame after a change
    result = run_axe(page, AXE_JS, details=True)
    bad = {rule: v for rule, v in result["by_rule"].items() if v["impact"] in ("critical", "serious")}
    report = "\n".join(f"{rule} ({v['impact']}, {v['nodes']} nodes): {v['help']}\n    "
                       + "\n    ".join(f"{n['target']} {n['html'][:120]}" for n in v.get("examples", []))
                       for rule, v in bad.items())
    assert not bad, f"axe on {name} ({theme}):\n{report}"
    app.assert_clean()
