"""Recorded GPU data: every file names its device, date, commit and command, and loads."""
import pytest

from engine import load_recorded
from engine.bench.recorded import recorded_names, save_recorded


def test_every_recorded_file_says_where_it_comes_from():
    names = recorded_names()
    assert "kernels" in names
    for name in names:
        data = load_recorded(name)
        assert data["name"] == name
        assert data["device"] and data["command"].startswith("python -m ") and len(data["commit"]) >= 7
        assert data["results"]


def test_unknown_and_hostile_names():
    assert load_recorded("never-recorded") is None
    with pytest.raises(ValueError):
        load_recorded("../../etc/passwd")


def test_save_then_load_round_trip(tmp_path, monkeypatch):
    import engine.bench.recorded as rec
    monkeypatch.setattr(rec, "DATA_DIR", tmp_path)
    save_recorded("demo", "NVIDIA H200", "python -m engine bench demo", {"x": 1}, date="2026-01-01", commit="abc1234")
    assert load_recorded("demo")["results"] == {"x": 1}
