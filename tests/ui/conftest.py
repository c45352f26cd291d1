"""Browser tests: a real `panel serve app` subprocess driven by Debian's Chromium via Playwright.

Every page a test opens has all non-local requests aborted (the app must be fully offline) and
records console errors, page errors and failed or 4xx/5xx requests; a test fails if any occurred.
Screenshots go to artifacts/screenshots/ (git-ignored; CI keeps them as artifacts).

Set LLM_EXPLAINER_RANDOM_WEIGHTS=1 to run the generate widget on random weights (no model file);
by default the server loads the real default model, as a reader's server would.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic"]
LOCAL_PREFIXES = ("http://localhost:", "ws://localhost:", "http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"panel serve exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)     # polling a condition, not waiting for a guessed duration
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@pytest.fixture(scope="session")
def server():
    """`panel serve app` exactly as the README says, plus a free port."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    port = _free_port()
    log_path = ROOT / "artifacts" / "panel-serve.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "panel", "serve", "app", "--port", str(port)],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://localhost:{port}/app"
    try:
        _wait_http(base, proc, timeout_s=90)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Problems:
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    blocked_outside: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return self.console_errors + self.failed_requests + self.blocked_outside + self.dialogs


class AppPage:
    """A Playwright page on our server with the network to the outside blocked."""

    def __init__(self, page, base: str):
        self.page, self.base, self.problems = page, base, Problems()
        page.route("**/*", self._route)
        page.on("console", lambda m: self.problems.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.problems.console_errors.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.problems.failed_requests.append(f"{r.url} ({r.failure})"))
        page.on("response", lambda r: self.problems.failed_requests.append(f"HTTP {r.status} {r.url}")
                if r.status >= 400 else None)
        page.on("dialog", self._dialog)

    def _route(self, route):
        url = route.request.url
        if url.startswith(LOCAL_PREFIXES):
            route.continue_()
        else:
            self.problems.blocked_outside.append(url)
            route.abort()

    def _dialog(self, dialog):
        self.problems.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def open(self, query: str = ""):
        self.page.goto(self.base + query)
        self.wait_rendered()
        return self.page

    def wait_rendered(self):
        # Bokeh has rendered the document, so app.js removed the server-rendered preview that covered it,
        # and our main column is in it (Playwright's CSS engine pierces the open shadow roots Bokeh
        # renders into). Before that, the same selectors would find the preview's copies.
        self.page.wait_for_selector("#ex-preview", state="detached", timeout=30_000)
        self.page.wait_for_selector(".ex-main .prose h1, .ex-main h1", timeout=30_000)

    def screenshot(self, name: str, full_page: bool = False):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)

    def assert_clean(self):
        # A local request cancelled because the test navigated away (net::ERR_ABORTED) is not a
        # failure of the app; anything else is, including every attempt to reach the outside.
        problems = [p for p in self.problems.all()
                    if not ("net::ERR_ABORTED" in p and p.startswith(LOCAL_PREFIXES))]
        assert not problems, "page problems:\n" + "\n".join(problems)


@pytest.fixture
def app(browser, server):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    ap = AppPage(page, server)
    yield ap
    ctx.close()


@pytest.fixture
def phone(browser, server):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                              has_touch=True)
    page = ctx.new_page()
    ap = AppPage(page, server)
    yield ap
    ctx.close()


@pytest.fixture(scope="session")
def app_page_class():
    """AppPage for tests that open pages in browser contexts of their own (import-free: every test
    folder has a conftest module, so `from conftest import ...` would depend on sys.path order)."""
    return AppPage
