"""One engine for every reader, holding up: a closed tab aborts its request at once (from the engine's
own numbers), an over-long address gets an answer, a huge paste is refused, the dashboard shows the
reader's request, and SIGTERM during generations exits cleanly. This module runs its own server
(random weights: mechanics only), because its last test stops it."""
from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")

from widgets.common.testing import wait_live, wait_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "artifacts" / "panel-serve-reliability.log"


@pytest.fixture(scope="module")
def own_server():
    from tests.ui.conftest import _free_port, _wait_http
    port = _free_port()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    log = open(LOG, "w")
    # sessions of closed pages are swept after 1 s, not Bokeh's 15-32 s (the memory test waits for them)
    proc = subprocess.Popen([sys.executable, "-m", "panel", "serve", "app", "--port", str(port), "--liveness",
                             "--unused-session-lifetime", "1000", "--check-unused-sessions", "1000"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "LLM_EXPLAINER_RANDOM_WEIGHTS": "1"})
    base = f"http://localhost:{port}"
    try:
        _wait_http(base + "/liveness", proc, timeout_s=90)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(15)
        log.close()


def engine(base: str) -> dict:
    with urllib.request.urlopen(base + "/engine.json", timeout=5) as r:
        return json.loads(r.read())


def wait_engine(base: str, ok, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        n = engine(base)
        if ok(n) or time.monotonic() > deadline:
            return n
        time.sleep(0.05)          # polling a condition against a deadline


def start_generation(page, tokens: int = 128):
    widget = page.locator(".widget-generate")
    widget.scroll_into_view_if_needed()
    wait_live(page, "generate")
    widget.locator(".gen-max-tokens input").fill(str(tokens))
    widget.locator(".gen-max-tokens input").press("Tab")
    widget.locator(".gen-button button").click()


def test_a_long_address_gets_a_clear_answer(own_server):
    base, _ = own_server
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/app?chapter=" + "a" * 100_000, timeout=30)
    assert err.value.code == 414 and "at most 16,384" in err.value.read().decode()
    log = LOG.read_text()
    assert "refused a 100,0" in log and "a" * 1000 not in log          # the access log names the size only
    with urllib.request.urlopen(base + "/liveness", timeout=5) as r:        # and the server still answers
        assert r.status == 200
    # 1.1 MB (Chromium sends addresses up to 2 MB) gets the same answer, where Tornado used to drop it
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/app?chapter=" + "a" * 1_100_000, timeout=30)
    assert err.value.code == 414 and "refused a 1,100,0" in LOG.read_text()
    # past the 4 MiB read limit no browser's request: dropped unread, but never silently
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(base + "/app?chapter=" + "a" * 5_000_000, timeout=30)
    deadline = time.monotonic() + 10
    while "dropped a connection whose request head passed 4,194,304 bytes" not in LOG.read_text():
        assert time.monotonic() < deadline, "no log line for the dropped connection"
        time.sleep(0.05)           # polling a condition against a deadline
    with urllib.request.urlopen(base + "/liveness", timeout=5) as r:
        assert r.status == 200


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_comes_back_after_sessions_close(own_server):
    """Rounds of pages opened over the websocket (every chapter's widgets built on the server) and
    dropped: once the server has swept them, its memory is back where the first round left it (that
    round fills the caches every later page shares: saved examples, the model's inspect passes)."""
    from app.content import list_chapters
    from app.loadtest import client_models
    from bokeh.client import pull_session
    base, proc = own_server
    client_models()
    slugs = [c.slug for c in list_chapters()]
    def open_every_chapter() -> None:
        for slug in slugs:
            with pull_session(url=f"{base}/app", arguments={"chapter": slug}) as session:
                assert session.document.roots, slug

    after = []
    for round_ in range(3):
        # On a thread of its own: Bokeh's client runs an event loop, and this worker process may already
        # run one on its main thread (Playwright's sync API, for the browser tests it ran before).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(open_every_chapter).result(timeout=600)
        n = wait_engine(base, lambda n: n.get("sessions") == 0, 120)
        assert n.get("sessions") == 0, f"round {round_}: {n.get('sessions')} sessions never swept"
        after.append(_rss_mb(proc.pid))
    print("RSS after each round (MB):", [round(x) for x in after])
    assert after[2] - after[0] < 100, f"RSS after each round (MB): {[round(x) for x in after]}"


def test_a_closed_tab_aborts_its_request(own_server, browser, app_page_class):
    base, _ = own_server
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    app = app_page_class(ctx.new_page(), base + "/app")
    page = app.open("?chapter=what-is-an-llm")
    generated_before = wait_engine(base, lambda n: n["status"] == "ready", 120)["generated"]
    start_generation(page, tokens=128)
    n = wait_engine(base, lambda n: n.get("running", 0) >= 1 and n["generated"] >= generated_before + 3, 120)
    assert n["running"] == 1 and n["kv_blocks_used"] > 0
    app.assert_clean()
    ctx.close()                                            # the reader closes the tab mid-reply
    n = wait_engine(base, lambda n: n["running"] == 0 and n["waiting"] == 0, 60)
    # Aborted, not run to its end: its blocks are free and it stopped short of the 128 tokens it asked for
    # (on an idle machine within a second of the close; the deadline above only bounds a crowded one).
    assert n["running"] == 0 and n["kv_blocks_used"] == 0, n
    assert n["generated"] - generated_before < 128, n
    wait_engine(base, lambda n: False, 0.5)                # let any late write to the socket happen
    log = LOG.read_text()
    assert "Task exception was never retrieved" not in log and "WebSocketClosedError" not in log


def test_the_dashboard_marks_this_readers_request_and_a_huge_paste_is_refused(own_server, browser, app_page_class):
    base, _ = own_server
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    cover = app_page_class(ctx.new_page(), base + "/app")
    cover.open("")                                             # the first page sets the anonymous reader cookie
    chapter = app_page_class(ctx.new_page(), base + "/app")     # same browser: later pages carry it
    page = chapter.open("?chapter=what-is-an-llm")
    cover.open("")
    start_generation(page)
    wait_live(cover.page, "engine-dashboard")
    wait_text(cover.page, ".widget-engine-dashboard .dash-chips", "you ·", timeout_ms=60_000)
    chip = cover.page.locator(".widget-engine-dashboard .dash-yours").first
    assert "your request" in chip.get_attribute("data-tip")
    page.locator(".widget-generate .gen-button button").click()    # Stop
    # A 1 MB paste into the prompt: refused in the page, with a note; nothing reached the server.
    box = page.locator(".widget-generate textarea")
    box.fill("short")
    box.evaluate("""(el) => { const dt = new DataTransfer(); dt.setData('text/plain', 'x'.repeat(1000000));
        el.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, composed: true,
                                                     cancelable: true})); }""")
    wait_text(page, ".widget-generate .paste-note", "Not pasted: that text has 1,000,000 characters")
    assert box.input_value() == "short"
    cover.assert_clean()
    chapter.assert_clean()
    ctx.close()


def test_a_closed_tab_frees_its_private_engines(own_server, browser, app_page_class):
    """The KV-cache widget steps two sandboxes of its own; closing the tab frees both at once (the
    websocket's close, not Bokeh's session sweep ~17 s later), seen from the engine's side."""
    base, _ = own_server
    before = wait_engine(base, lambda n: n["status"] == "ready", 90)["sandboxes"]
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    app = app_page_class(ctx.new_page(), base + "/app")
    page = app.open("?chapter=kv-cache")
    wait_live(page, "kv-cache")
    n = wait_engine(base, lambda n: n["sandboxes"] >= before + 2, 60)
    assert n["sandboxes"] >= before + 2 and n["sandbox_kv_mib"] > 0, n
    app.assert_clean()
    ctx.close()
    n = wait_engine(base, lambda n: n["sandboxes"] == before, 60)
    assert n["sandboxes"] == before, n


def test_the_openai_api_runs_on_the_readers_engine_and_shows_on_the_dashboard(own_server, browser, app_page_class):
    """`panel serve app` answers the OpenAI-compatible API at /v1 on the shared engine: the official client
    lists the model and completes; a streamed request is drawn on the cover's dashboard as an API chip
    beside the readers' requests; the readers' limits hold (max_tokens past the Generate widget's 128 is a
    400 naming the field); a client that leaves frees its blocks."""
    openai = pytest.importorskip("openai")
    import threading
    from app.openai_api import API_LIMITS
    base, _ = own_server
    wait_engine(base, lambda n: n["status"] == "ready", 120)
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    done = client.completions.create(model=model, prompt="The engine", max_tokens=4, temperature=0.0,
                                     extra_body={"ignore_eos": True})
    assert done.usage.completion_tokens == 4 and done.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError, match="at most 128 tokens") as err:
        client.completions.create(model=model, prompt="x", max_tokens=API_LIMITS.max_tokens + 1)
    assert err.value.body["param"] == "max_tokens"

    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    cover = app_page_class(ctx.new_page(), base + "/app")
    cover.open("")
    wait_live(cover.page, "engine-dashboard")
    stop = threading.Event()

    def keep_one_streaming():        # a stream at a time until the dashboard has drawn one (a slow machine
        while not stop.is_set():     # may finish a whole reply between two of its refreshes)
            # logprobs: a chunk for every token, so the loop sees `stop` at once (random weights decode to
            # no text, and a token without text or logprobs sends no chunk)
            stream = client.completions.create(model=model, prompt="Streaming from curl", max_tokens=128,
                                               stream=True, logprobs=1, extra_body={"ignore_eos": True})
            for _ in stream:
                if stop.is_set():
                    break
            stream.close()           # the client goes away mid-reply: the engine aborts the request
    streamer = threading.Thread(target=keep_one_streaming, daemon=True)
    streamer.start()
    try:
        wait_text(cover.page, ".widget-engine-dashboard .dash-chips", "API ·", timeout_ms=60_000)
        chip = cover.page.locator(".widget-engine-dashboard .dash-api").first
        assert "OpenAI-compatible API" in chip.get_attribute("data-tip")
    finally:
        stop.set()
        streamer.join(60)
    assert not streamer.is_alive()
    n = wait_engine(base, lambda n: n["running"] == 0 and n["kv_blocks_used"] == 0, 60)
    assert n["running"] == 0 and n["kv_blocks_used"] == 0, n
    cover.assert_clean()
    ctx.close()
    assert "Traceback" not in LOG.read_text()


def test_dashboard_screenshots_on_the_cover_and_in_chapter_14(own_server, browser, app_page_class):
    from widgets.common.testing import widget_screenshots
    base, _ = own_server
    shots = [*widget_screenshots(browser, base + "/app", app_page_class, "?", "engine-dashboard", tag="dashboard-cover"),
             *widget_screenshots(browser, base + "/app", app_page_class, "?chapter=continuous-batching",
                                 "engine-dashboard", tag="dashboard-ch14")]
    assert len(shots) == 8 and all(p.stat().st_size > 10_000 for p in shots)


def test_sigterm_while_the_model_loads_exits_cleanly():
    """A restart that comes while the engine is still loading (torch half-way in) exits 0, with no C++ abort."""
    from tests.ui.conftest import _free_port
    log_path = LOG.with_name("panel-serve-sigterm-load.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "panel", "serve", "app", "--port", str(_free_port())],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "LLM_EXPLAINER_RANDOM_WEIGHTS": "1"})
        try:
            deadline = time.monotonic() + 120
            while "starting the shared engine" not in log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.01)       # polling a condition: the load has begun (torch's import takes seconds)
            before = log_path.read_text()
            assert "starting the shared engine" in before and "engine ready" not in before, before[-2000:]
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(15)
    text = log_path.read_text()
    assert code == 0 and "terminate called" not in text, text[-2000:]


def test_sigterm_during_generations_exits_cleanly(own_server, browser, app_page_class):
    base, proc = own_server
    ctxs = []
    for _ in range(2):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        ctxs.append(ctx)
        start_generation(app_page_class(ctx.new_page(), base + "/app").open("?chapter=what-is-an-llm"))
    wait_engine(base, lambda n: n.get("running", 0) >= 2, 120)
    logged_before = len(LOG.read_text())
    proc.send_signal(signal.SIGTERM)                       # what a deployment's every restart does
    try:
        code = proc.wait(timeout=30)
    finally:
        for ctx in ctxs:
            ctx.close()
    assert code == 0, LOG.read_text()[-2000:]
    after = LOG.read_text()[logged_before:]
    # the readers' replies end quietly: a stopping server is not a failure of their jobs
    assert "terminate called" not in after and "Traceback" not in after, after[-3000:]
