"""Sandboxes owned by pages: freed (from the engine's own state) when the page's session ends, with a
step in flight; bounded per page with a message; and no widget makes one behind the toolkit's back."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("bokeh")

from bokeh.document import Document  # noqa: E402
from bokeh.events import ConnectionLost  # noqa: E402

from engine import SamplingParams  # noqa: E402
from engine.sandbox import SandboxFreed  # noqa: E402
from widgets.common.sandboxes import PageSandboxes, owned_by, page_sandboxes, sandbox  # noqa: E402
from widgets.common.sharing import Refused  # noqa: E402

BOX = dict(num_kv_blocks=8, max_num_seqs=2, enable_prefix_caching=False)


def wait_until(ok, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not ok() and time.monotonic() < deadline:
        time.sleep(0.01)            # polling a condition against a deadline
    return ok()


def test_free_releases_the_kv_memory_at_once_and_refuses_more_work(llm):
    box = llm.sandbox(**BOX)
    assert box.kv_bytes == llm.sandbox_kv_bytes(**BOX) == sum(t.numel() * 4 for t in box.kv_cache.kv)
    swapper = llm.sandbox(num_kv_blocks=4, preemption_mode="swap", swap_space_blocks=3)
    assert swapper.kv_bytes == llm.sandbox_kv_bytes(num_kv_blocks=4, preemption_mode="swap", swap_space_blocks=3)
    box.add_request("a", llm.tokenizer.encode_ids("free me"), SamplingParams(max_tokens=4, ignore_eos=True))
    box.step()
    assert box in llm.sandboxes() and box.allocator_state().tables["a"]
    box.free()
    assert box.freed and box not in llm.sandboxes() and box.kv_cache.kv == [] and not box.has_unfinished()
    with pytest.raises(SandboxFreed):
        box.step()
    with pytest.raises(SandboxFreed):
        box.add_request("b", [5, 6], SamplingParams(max_tokens=1))
    box.free()                                                     # twice is fine
    swapper.free()


def _step_until_freed(box, result: dict) -> None:
    try:
        while True:
            box.step()
    except SandboxFreed:
        result["stopped"] = True


@pytest.mark.parametrize("how", ["websocket closes", "session destroyed"])
def test_a_pages_sandboxes_are_freed_when_its_session_ends(llm, how):
    doc, other = Document(), Document()
    page_sandboxes(doc), page_sandboxes(other)                     # what JobRunner does when a widget starts
    with owned_by(doc):                                            # what JobRunner does around a job's work
        mine = [sandbox(llm, **BOX), sandbox(llm, **BOX)]
    with owned_by(other):
        theirs = sandbox(llm, **BOX)
    busy = mine[0]
    busy.add_request("long", llm.tokenizer.encode_ids("a long answer"),
                     SamplingParams(max_tokens=120, ignore_eos=True))
    result: dict = {}
    stepper = threading.Thread(target=_step_until_freed, args=(busy, result))
    stepper.start()
    assert wait_until(lambda: busy.trace.num_steps >= 2)          # mid-generation when the page goes
    if how == "websocket closes":
        doc.callbacks.trigger_event(ConnectionLost())
    else:
        for callback in list(doc.session_destroyed_callbacks):
            callback(None)
    # Asserted from the engine's side: neither of the page's sandboxes holds KV memory any more.
    assert wait_until(lambda: not any(s in llm.sandboxes() for s in mine))
    stepper.join(10)
    assert result.get("stopped") and all(s.kv_cache.kv == [] for s in mine)
    assert theirs in llm.sandboxes() and not theirs.freed             # another page's sandbox is untouched
    with owned_by(doc), pytest.raises(Refused, match="closed"):
        sandbox(llm, **BOX)                                        # a late job of the closed page gets none
    theirs.free()


def test_a_page_is_refused_past_its_kv_budget_and_freeing_makes_room(llm):
    price = llm.sandbox_kv_bytes(**BOX)
    ledger = PageSandboxes(limit=2 * price)
    a, b = ledger.open(llm, **BOX), ledger.open(llm, **BOX)
    assert ledger.kv_bytes == 2 * price
    before = len(llm.sandboxes())
    with pytest.raises(Refused, match=r"limit per page is \d+ MiB"):
        ledger.open(llm, **BOX)
    assert len(llm.sandboxes()) == before                          # refused before anything was allocated
    a.free()
    c = ledger.open(llm, **BOX)
    assert ledger.kv_bytes == 2 * price
    ledger.end(wait=True)
    assert not {b, c} & set(llm.sandboxes())


def test_no_widget_makes_a_sandbox_behind_the_toolkit(llm):
    """`llm.sandbox(` in a widget would escape its page's limit and its freeing at the page's end."""
    widgets = Path(__file__).resolve().parents[2] / "widgets"
    direct = [f"{p.relative_to(widgets)}:{i}" for p in widgets.rglob("*.py") if p.name != "sandboxes.py"
              for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\.sandbox\(", line)]
    assert direct == []


def test_free_stops_a_thread_stepping_in_a_tight_loop_at_its_next_step(llm):
    """Locks are not fair: a thread that releases the sandbox's lock and takes it again at once can keep
    free() waiting for as long as it steps. free() must stop it at its next step instead."""
    box = llm.sandbox(num_kv_blocks=64, max_num_seqs=1, enable_prefix_caching=False)
    box.add_request("long", llm.tokenizer.encode_ids("a long answer"), SamplingParams(max_tokens=900, ignore_eos=True))
    result: dict = {}
    stepper = threading.Thread(target=_step_until_freed, args=(box, result))
    stepper.start()
    assert wait_until(lambda: box.trace.num_steps >= 2)
    before = box.trace.num_steps
    box.free()
    after = box.trace.num_steps
    stepper.join(60)
    assert result.get("stopped")
    # at most the step in flight and one begun before free() was called, however fast the stepper loops
    assert after - before <= 2, f"free() waited for {after - before} steps"
