"""The sampler widget (chapter 10) against the engine: its shaped distribution and its seeded draws are the
engine sampler's, the chapter's printed sampler picks the same tokens as the engine, the filter each
cut token is blamed on really cuts it, the saved example is fresh, and the widget reshapes live."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("panel")

from engine import SamplingParams  # noqa: E402
from widgets.common.testing import LoadedEngine, assert_example_fresh  # noqa: E402
from engine import sampling_probs  # noqa: E402
from widgets.sampler.compute import TOP, cut_by, draw, next_token_logits, shape  # noqa: E402
from widgets.sampler.widget import SamplerWidget  # noqa: E402

from engine.model.sampler import make_generator, sample  # noqa: E402  (the engine's sampler itself)

PROMPT = "My favourite colour is"
SETTINGS = [dict(), dict(temperature=0.7), dict(top_k=5), dict(top_p=0.5), dict(min_p=0.1),
            dict(temperature=1.3, top_k=30, top_p=0.8, min_p=0.02), dict(temperature=0.5, top_k=3, top_p=0.6),
            dict(temperature=0.0)]
CHAPTER = Path(__file__).resolve().parents[2] / "content" / "10-sampling.md"


@pytest.fixture(scope="module")
def logits(llm, one_torch_thread):
    return next_token_logits(llm, PROMPT, 128)[1]


def engine_draws(logits, params, seeds):
    """The token the engine's sampler picks for this row with each seed (one draw per generator)."""
    return [sample(logits[None], [params], [make_generator(s)])[0] for s in seeds]


@pytest.mark.parametrize("kw", SETTINGS, ids=str)
def test_shaped_distribution_and_draws_are_the_engines(llm, logits, kw):
    params = SamplingParams(**kw)
    s = shape(llm, logits, params, n=200, seed=0)
    probs = sampling_probs(logits, params)
    # a float32 softmax over V terms: its normaliser is a float32 sum, whose rounding error is bounded by
    # V * eps relative (recursive summation); CPUs with other vector widths land anywhere inside that
    assert probs.double().sum().item() == pytest.approx(1.0, abs=probs.numel() * torch.finfo(torch.float32).eps)
    assert s.p_shaped == probs[s.ids].tolist() and s.survivors == int((probs > 0).sum())
    # draw #k of seed s: the engine's own sampler, given a fresh generator with seed s, picks the same
    seeds = range(60)
    ours = [int(draw(probs, 1, seed)[0]) for seed in seeds]
    assert ours == engine_draws(logits, params, seeds)
    # and a draw never lands on a token the sampler gives no chance
    assert all(probs[t] > 0 for t in draw(probs, 5000, 3).tolist())


def test_the_chapters_sampler_picks_the_engines_tokens(logits):
    """The sampler printed in chapter 10 filters in the engine's order and draws as it does. Compared on
    the real row's 64 most likely tokens: over all 49,152, float32 rounding in the tail (both drop
    tokens whose mass-before rounds to 1) differs between any two ways of writing the arithmetic."""
    code = re.search(r"```python\n(import torch\n\ndef sample\(.*?)```", CHAPTER.read_text(), re.S)[1]
    assert len(code.strip().splitlines()) < 22            # "under twenty lines": the def and its body
    ns: dict = {}
    exec(code, ns)
    row = torch.topk(logits, 64).values[torch.randperm(64, generator=torch.Generator().manual_seed(0))]
    for kw in SETTINGS:
        params = SamplingParams(**kw)
        seeds = range(100)
        chapter = [ns["sample"](row, params.temperature, params.top_k, params.top_p, params.min_p,
                                make_generator(s)) for s in seeds]
        assert chapter == engine_draws(row, params, seeds), kw


def test_the_chapters_worked_example_is_the_engines():
    """"My favourite colour is" in miniature: top-k 3 then top-p 0.8 keeps two tokens, because top-p
    sees the three survivors renormalised (0.561, 0.252, 0.187), not the raw row."""
    mini = torch.tensor([4.0, 3.2, 2.9, 1.5, 1.0, 0.2])
    assert torch.softmax(mini, 0)[:3].tolist() == pytest.approx([0.516, 0.232, 0.172], abs=5e-4)
    three = sampling_probs(mini, SamplingParams(top_k=3))
    assert three[:3].tolist() == pytest.approx([0.561, 0.252, 0.187], abs=5e-4)
    both = sampling_probs(mini, SamplingParams(top_k=3, top_p=0.8))
    assert (both > 0).tolist() == [True, True, False, False, False, False]
    assert (sampling_probs(mini, SamplingParams(top_p=0.8)) > 0).sum() == 3     # on the raw row: three


def test_filter_order_matters_for_top_p_only(logits):
    """top-p after top-k (renormalised survivors) keeps fewer tokens than top-p on the raw row."""
    both = sampling_probs(logits, SamplingParams(top_k=3, top_p=0.6))
    raw = torch.softmax(logits, -1).sort(descending=True).values
    kept_raw_top_p = int((raw.cumsum(0) - raw < 0.6).sum())
    assert int((both > 0).sum()) < min(3, kept_raw_top_p)


def test_seeded_draws_are_reproducible_and_the_first_is_the_engines_first_token(llm, logits):
    probs = sampling_probs(logits, SamplingParams(temperature=1.0))
    assert torch.equal(draw(probs, 1000, 7), draw(probs, 1000, 7))
    assert not torch.equal(draw(probs, 1000, 7), draw(probs, 1000, 8))
    for seed in (0, 1, 2):
        s = shape(llm, logits, SamplingParams(), n=100, seed=seed)
        out = llm.generate(PROMPT, SamplingParams(seed=seed, max_tokens=1))[0].outputs[0]
        assert out.token_ids[0] == s.first_draw


def test_each_cut_token_is_cut_by_the_filter_named(llm, logits):
    ids = torch.topk(logits, TOP).indices.tolist()
    for kw in SETTINGS[1:-1]:
        params = SamplingParams(**kw)
        full = sampling_probs(logits, params)
        for i, why in zip(ids, cut_by(logits, params, ids)):
            assert (why == "") == bool(full[i] > 0)
            alone = {"top-k": dict(top_k=params.top_k), "min-p": dict(min_p=params.min_p)}.get(why)
            if alone is not None:                          # that filter alone removes it
                assert sampling_probs(logits, SamplingParams(temperature=params.temperature, **alone))[i] == 0
    cuts = cut_by(logits, SamplingParams(top_k=3), ids)
    assert cuts[:3] == ["", "", ""] and set(cuts[3:]) == {"top-k"}


def test_saved_example_is_fresh(llm, one_torch_thread):
    # "survivors" counts tokens whose float32 probability is not zero: the far tail's rounding moves
    # with the CPU's reduction order (thread count), by a few dozen of ~27,000. Everything else must match.
    assert_example_fresh("sampler", llm, ignore={"survivors"})


def test_the_widget_reshapes_live_and_writes_both_continuations(llm, one_torch_thread):
    w = SamplerWidget(LoadedEngine(llm), prompt=PROMPT)
    assert w._shaper.wait_idle(120)               # the prompt's logits and the first shaping
    assert "␣blue" in w._src.data["label"][0] and len(w._src.data["label"]) == TOP + 1
    w._top_k.value = 3
    assert w._shaper.wait_idle(60)
    assert sum(p > 0 for p in w._src.data["shaped"]) == 3 and "3 of 49,152 tokens" in w._summary.object
    assert w._src.data["fate"][3] == "cut by top-k"
    w._seed.value = 10**12                        # out of range: clamped, and the page says so
    assert w._shaper.wait_idle(60)
    assert "Seed is 0–2147483647" in w.notes.object
    w._continue()
    assert w.jobs.wait_idle(120)
    greedy = llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=24))[0].outputs[0]
    assert 'data-kind="greedy"' in w._conts.object
    assert "".join(re.findall(r'title="token id (\d+)"', w._conts.object.split('data-kind="sampled"')[0])) == \
        "".join(map(str, greedy.token_ids))
    w._box.param.update(value="<img src=x onerror=alert(1)>", value_input="<img src=x onerror=alert(1)>")
    assert w._shaper.wait_idle(60)
    assert "<img" not in w._summary.object and "<img" not in w._conts.object


def test_a_slider_moved_while_a_new_prompt_waits_still_gets_the_new_prompt(llm, one_torch_thread):
    w = SamplerWidget(LoadedEngine(llm), prompt="The capital of France is")
    assert w._shaper.wait_idle(120)
    w._box.value = PROMPT                        # debounced: its job is still waiting...
    w._top_k.value = 3                           # ...when this job replaces it
    assert w._shaper.wait_idle(120)
    assert "␣blue" in w._src.data["label"][0] and sum(p > 0 for p in w._src.data["shaped"]) == 3
