"""The load test, small: a browser reader and websocket readers at once, no errors, the engine drained.
(The big run — 100 readers for 5 minutes — is in the README; it is not for CI.)"""
from __future__ import annotations

from pathlib import Path

import pytest


def test_a_small_load_test_runs_clean(monkeypatch):
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no Chromium")
    monkeypatch.setenv("LLM_EXPLAINER_LOG_EVERY_S", "2")      # several console lines fit in the short run
    from app.loadtest import main
    result = main(["--readers", "3", "--seconds", "12", "--random-weights"])
    assert result["errors"] == 0, result["error_samples"]
    assert result["widget_response_ms"]["browser_first_token"]["n"] >= 1
    assert result["widget_response_ms"]["websocket_session"]["n"] >= 1
    assert result["kv_blocks_in_use_after"] == 0 and result["engine_alive"]
    assert result["engine_generated_tokens"] > 0 and result["server_exit_code"] == 0
    # what a reader feels: the page to a live widget, and the probe's reply quiet and under load
    assert result["widget_response_ms"]["browser_widget_live"]["n"] >= 1
    assert result["probe_quiet_ms"]["first_token"] > 0 and result["probe_quiet_ms"]["token_delay"] > 0
    assert result["decode_steps_per_s"]["quiet"] > 0
    # The operator's console shows the engine's periodic line (the server's log level must let it through).
    assert result["server_engine_log_lines"] >= 1, result["server_log"]
