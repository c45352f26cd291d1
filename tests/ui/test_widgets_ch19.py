"""The parallelism widget (chapter 19) in Chromium: it paints the saved runs at once, then runs the
reader's prompt for real with tensor parallelism (3 processes) and pipeline parallelism (2 stages) on
this server and shows the same text as the one-process engine; the split view follows the choices, a
size that does not fit is refused in words, hover links one rank's slices, reader text stays text,
and it fits 1280 and 390 px in both themes."""
from __future__ import annotations


import pytest

pytest.importorskip("panel")
pytest.importorskip("playwright")

from widgets.common.testing import SCREENSHOTS, deep_count, wait_live, wait_text, widget_screenshots  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTER = "?chapter=scaling-out"
W = ".widget-parallelism"
RUN_MS = 300_000          # spawning processes and loading a shard in each, on a busy 2-core machine


def texts(page) -> tuple[str, str]:
    return (page.locator(f"{W} .pz-parallel").inner_text(), page.locator(f"{W} .pz-single").inner_text())


def run_and_wait(page, what: str) -> None:
    page.locator(f"{W} .pz-run button").click()
    page.locator(f'{W} .w-status[data-state="busy"]').wait_for(timeout=30_000)
    # an honest wait: which of the run's three stages is going on, and how far (never a bare "Computing…")
    wait_text(page, f"{W} .pz-progress-line", "Step 1 of 3 · starting", timeout_ms=60_000)
    wait_text(page, f"{W} .pz-texts", what, timeout_ms=RUN_MS)
    wait_live(page, "parallelism", timeout_ms=RUN_MS)


def test_runs_tp_and_pp_for_real_and_the_text_is_the_same(app):
    page = app.open(CHAPTER)
    page.locator(f"{W} .pz-matrix").first.wait_for(timeout=60_000)     # the saved runs paint at once
    assert deep_count(page, f"{W} .pz-matrix") == 8
    wait_text(page, f"{W} .pz-same", "the same text")
    wait_live(page, "parallelism")

    prompt = "<img src=x onerror=alert(1)> Name one planet."
    page.locator(f"{W} .pz-prompt textarea").fill(prompt)
    page.locator(f"{W} .pz-tokens input").fill("3")
    run_and_wait(page, "Name one planet")
    wait_text(page, f"{W} .pz-texts", "<img src=x onerror")          # shown as text, nothing ran
    wait_text(page, f"{W} .pz-texts", "tp=3 on 3 processes")
    parallel, single = texts(page)
    assert parallel == single and parallel.strip()
    wait_text(page, f"{W} .pz-same", "the same text")
    wait_text(page, f"{W} .pz-check", "2 per layer × 30 layers")
    assert "measured on 3 CPU processes" in page.locator(f"{W} .pz-texts").inner_text()

    page.locator(f"{W} .pz-mode button", has_text="pipeline parallel").click()
    page.locator(f"{W} .pz-size select").select_option("2")
    wait_text(page, f"{W} .pz-legend", "stage 1 = rank 1: layers 16–30")
    run_and_wait(page, "pp=2 on 2 processes")
    parallel, single = texts(page)
    assert parallel == single and parallel.strip()
    assert deep_count(page, f"{W} .pz-lane") == 2
    wait_text(page, f"{W} .pz-check", "Idle share (the bubble)")
    page.locator(W).first.screenshot(path=str(SCREENSHOTS / "parallelism-pp-run-1280-light.png"))
    app.assert_clean()


def test_refusal_hover_and_layout(app, browser, server, app_page_class):
    page = app.open(CHAPTER)
    wait_live(page, "parallelism")
    page.locator(f"{W} .pz-size select").select_option("2")             # 2 does not split 9 heads
    wait_text(page, f"{W} .w-note", "sizes that work: 1, 3, 9")
    assert page.locator(f"{W} .pz-run button").is_disabled()
    page.locator(f"{W} .pz-size select").select_option("9")             # 9 works, but not on this server
    wait_text(page, f"{W} .w-note", "the limit is 3")
    assert deep_count(page, f"{W} .pz-matrix[data-weight=wq] .pz-slice") == 9
    page.locator(f'{W} .pz-matrix[data-weight=wq] .pz-slice[data-link="rank-4"]').hover()
    assert deep_count(page, f'{W} .pz-slice.linked[data-link="rank-4"]') == 8   # that rank in every matrix
    page.locator(f"{W} .pz-scenario button", has_text="decode, 1 user").click()
    wait_text(page, f"{W} .pz-model", "1 × 8,192 × 2 B")
    model = page.locator(f"{W} .pz-model").first.inner_text()         # no developer's placeholder
    # the two-GPU record, labelled like every recorded figure (device, command, date), never a placeholder
    assert "not recorded yet" not in model and "will put" not in model
    assert "No multi-GPU measurement is recorded for this page" in model or "recorded on" in model
    app.assert_clean()
    shots = widget_screenshots(browser, server, app_page_class, CHAPTER, "parallelism")
    assert len(shots) == 4
