"""The RoPE widget against the model: `llm.rope` is the rotation attention applies, the score depends
only on m − n (to float32's rounding of the angles), the pair speeds are theta^(-2i/d), and the widget
keeps the distance when asked."""
from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("panel")

from widgets.common.handle import EngineStatus  # noqa: E402
from tests.helpers.fakes import FakeHandle  # noqa: E402
from widgets.common.testing import assert_example_fresh  # noqa: E402
from widgets.rope.compute import content, pair_speeds, rope_view, score  # noqa: E402
from widgets.rope.widget import RopeWidget  # noqa: E402


def test_llm_rope_is_the_rotation_attention_applies(llm):
    """Queries recomputed from the hidden states without RoPE, turned by llm.rope to their positions,
    are the queries inspect saw inside attention."""
    ins = llm.inspect("The capital of France is")
    T, layer = len(ins.tokens), 5
    block = llm.model.layers[layer]
    with torch.inference_mode():
        raw = block.attention.wq(block.attention_norm(ins.hidden_states[layer])).view(T, llm.config.num_heads, -1)
    torch.testing.assert_close(llm.rope(raw, torch.arange(T)), ins.q[layer], atol=1e-5, rtol=1e-5)
    back = llm.rope(ins.q[layer], -torch.arange(T))                    # a negative position turns back
    torch.testing.assert_close(back, raw, atol=1e-5, rtol=1e-5)


def test_the_score_depends_only_on_the_distance(llm):
    q, k, speeds = content(llm)
    # Float32 rounds each angle position·θ_i (and θ_i) by up to ~2 eps relative, which moves pair i's term
    # of q·k/√d by up to |q_i||k_i|/√d · 2·eps·position·θ_i, at the query's and the key's position (m + n ≤
    # 557 below); the 64-term dot product adds 64·eps·Σ|q_i||k_i|/√d. Two scores differ by at most twice that.
    half, eps = q.shape[-1] // 2, torch.finfo(torch.float32).eps
    pair = (torch.hypot(q[..., :half], q[..., half:]) * torch.hypot(k[..., :half], k[..., half:])).flatten()
    pair = pair / math.sqrt(2 * half)
    tol = 2 * float(2 * eps * 557 * (pair * torch.tensor(speeds)).sum() + 2 * half * eps * pair.sum())
    for d in (0, 1, 3, 10, 57):
        scores = [score(llm, q, k, n + d, n) for n in (0, 1, 7, 40, 113, 250)]
        assert max(scores) - min(scores) <= tol, (d, scores, tol)
    # ... and the distance does matter: otherwise the test above would prove nothing.
    assert abs(score(llm, q, k, 5, 4) - score(llm, q, k, 5, 1)) > 0.05


def test_pair_speeds_are_the_models_frequencies(llm):
    speeds = pair_speeds(llm)
    d, theta = llm.config.head_dim, llm.config.rope_theta
    assert theta == 100_000 and len(speeds) == d // 2
    for i, s in enumerate(speeds):
        assert math.isclose(s, theta ** (-2 * i / d), rel_tol=1e-4), i


def test_view_turns_arrows_without_changing_their_length(llm):
    a, b = rope_view(llm, 0, 0, (0, 15)), rope_view(llm, 9, 2, (0, 15))
    for p0, p1 in zip(a["pairs"], b["pairs"]):
        assert math.isclose(math.hypot(*p0["q"]), math.hypot(*p1["q"]), rel_tol=1e-5)
        turned = (p1["q_angle"] - p0["q_angle"]) % (2 * math.pi)
        assert math.isclose(turned, (9 * p0["speed"]) % (2 * math.pi), abs_tol=1e-4)
    assert b["curve"][7] == pytest.approx(b["score"], abs=1e-5)          # the curve is the same score
    assert all(s["score"] == pytest.approx(b["score"], abs=1e-4) for s in b["same"])


def test_saved_example_is_fresh(llm):
    assert_example_fresh("rope", llm)


def test_widget_moves_both_positions_together_and_refuses_leaving_the_window(llm):
    handle = FakeHandle(EngineStatus.LOADING, _llm=llm)
    w = RopeWidget(handle)
    assert "1.176" in w._readout.object                                  # the saved example, painted at once
    handle.status = EngineStatus.READY
    w.gate.check()
    assert w.jobs.wait_idle(60)
    w._m.value, w._n.value = 30, 20
    before = w._readout.object.split("pairs: ")[1][:60]
    w._together.value = True
    w._m.value = 130
    assert (w._m.value, w._n.value) == (130, 120) and "m − n = 10" in w._readout.object
    assert w._readout.object.split("pairs: ")[1][:60] == before          # same distance, same score
    w._n.value = 0                                                        # m would become 10: allowed
    assert (w._m.value, w._n.value) == (10, 0)
    w._m.value = 8191 + 0                                                 # n would be 8,181: allowed
    w._m.value = 5                                                        # n would be -8,176: refused
    assert (w._m.value, w._n.value) == (8191, 8181) and "not moved" in w.notes.object
    w._together.value = False
    w._n.value = 99_999                                                   # typed past the window: clamped
    assert w._n.value == 8191 and w._n.end == 8191 and "using 8191, not 99,999" in w.notes.object
    assert "m − n = 0" in w._readout.object
    w._pair_b.value = 31
    assert "pair 31" in w._plots[1].figure.title.text


def test_pair_plots_leave_room_at_their_edges():
    """ux review ch. 6: marks clipped at the left edge. The circles have 15% of room around them (an
    arrow's dot on its circle stays inside), each pair plot's title starts with the pair it shows, and
    the score curve keeps the theme's border."""
    from widgets.common.theme import MIN_BORDER
    w = RopeWidget(FakeHandle(EngineStatus.LOADING))
    for plot in w._plots:
        fig = plot.figure
        assert fig.title.text.startswith("pair ")
        assert fig.x_range.range_padding >= 0.15 and fig.y_range.range_padding >= 0.15
    assert w._curve.figure.min_border_left >= MIN_BORDER and w._curve.figure.min_border_right >= MIN_BORDER
