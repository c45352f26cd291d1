"""The speculative-decoding widget (chapter 18) against the engine: its steps are the engine's verify
entries and its reply is plain decoding's, token for token; its numbers are the engine's statistics
and the closed form; the simulator meets the closed form; everything shown is escaped; the saved
example is fresh."""
from __future__ import annotations

import pytest

pytest.importorskip("panel")           # the GPU machine has no Panel (pytest -m gpu must still collect)
from engine import SamplingParams, expected_tokens_per_pass  # noqa: E402
from widgets.common.testing import assert_example_fresh  # noqa: E402
from widgets.speculative_decoding.compute import SpecStepper, spec_config  # noqa: E402
from widgets.speculative_decoding.simulator import MAX_ROUNDS, Simulator, closed_form_curve  # noqa: E402
from widgets.speculative_decoding.view import chip, engine_stats_html, reply_html, round_html, sim_stats_html, steps_html  # noqa: E402

PROMPT = "Write a short poem that uses this sentence twice: The quick brown fox jumps over the lazy dog."


def plain_tokens(llm, prompt: str, max_tokens: int) -> list[int]:
    return llm.generate(llm.format_prompt(prompt, chat=True),
                        SamplingParams(temperature=0.0, max_tokens=max_tokens))[0].outputs[0].token_ids


@pytest.mark.parametrize("method,k", [("ngram", 4), ("early_exit", 3), ("draft_model", 2)])
def test_engine_mode_is_the_engine(llm, method, k):
    stepper = SpecStepper(llm, PROMPT, method=method, k=k, num_layers=20, max_tokens=24)
    views = []
    while (v := stepper.step()) is not None:
        views.append(v)
    assert views[0].kind == "prefill" and len(views[0].tokens) == 1
    shown = [t.token_id for v in views for t in v.tokens if t.status not in ("rejected", "unjudged", "dropped")]
    assert shown == stepper.output_ids == plain_tokens(llm, PROMPT, 24)     # speculation changed nothing
    s = stepper.summary()
    verify = [v for v in views if v.kind == "verify"]
    assert s["passes"] == len(views) and s["tokens"] == len(shown)
    assert s["drafts"] == sum(v.num_drafts for v in verify) and s["accepted"] == sum(v.num_accepted for v in verify)
    for v in verify:                                   # chips: kept run, one rejection, the rest unjudged
        statuses = [t.status.replace("dropped", "accepted") for t in v.tokens[:-1]]
        assert statuses == ["accepted"] * v.num_accepted + (["rejected"] if v.num_accepted < v.num_drafts else []) \
            + ["unjudged"] * max(0, v.num_drafts - v.num_accepted - 1)
        assert v.tokens[-1].status in ("dropped", "bonus" if v.num_accepted == v.num_drafts else "correction")
    if s["a"] is not None:
        assert s["closed_form"] == pytest.approx(expected_tokens_per_pass(s["a"], k))
    if method == "draft_model":                        # the target drafting for itself: every draft kept
        assert s["a"] == 1.0
    if method == "ngram":                              # the sentence comes back: the lookup finds some of it
        assert s["accepted"] > 0


def test_sampled_steps_show_p_and_q(llm):
    stepper = SpecStepper(llm, PROMPT, method="draft_model", k=3, temperature=0.8, max_tokens=12)
    views = [v for v in iter(stepper.step, None)]
    drafts = [t for v in views if v.kind == "verify" for t in v.tokens[:-1] if t.status != "unjudged"]
    assert drafts and all(t.p is not None and t.q is not None and 0 <= t.p <= 1 and 0 < t.q <= 1 for t in drafts)
    assert all(t.status == "accepted" for t in drafts)   # p == q exactly: min(1, p/q) = 1
    again = SpecStepper(llm, PROMPT, method="draft_model", k=3, temperature=0.8, max_tokens=12)
    list(iter(again.step, None))
    assert again.output_ids == stepper.output_ids      # seeded: the same settings replay the same steps


def test_closing_aborts_and_frees_the_blocks(llm):
    stepper = SpecStepper(llm, PROMPT, method="ngram", k=4, max_tokens=40)
    stepper.step()
    stepper.step()
    assert stepper.engine.num_free_blocks() < stepper.engine.block_manager.num_blocks
    stepper.close()
    assert stepper.done and stepper.engine.num_free_blocks() == stepper.engine.block_manager.num_blocks


def test_a_draft_model_needs_a_file(llm):
    assert spec_config(llm, "draft_model", 2, 1)["model"] == str(llm.source)
    with pytest.raises(ValueError):
        spec_config(llm, "medusa", 2, 1)


@pytest.mark.parametrize("a,k", [(0.8, 4), (0.6, 10), (0.3, 2)])
def test_simulator_meets_the_closed_form(a, k):
    sim = Simulator(seed=1)
    sim.run(a, k, 20_000)
    assert sum(sim.histogram) == sim.rounds == 20_000
    assert sim.tokens == sum((i + 1) * n for i, n in enumerate(sim.histogram))
    probs = [a ** i * (1 - a) for i in range(k)] + [a ** k]
    var = sum((i + 1) ** 2 * p for i, p in enumerate(probs)) - sim.closed_form ** 2
    assert abs(sim.tokens_per_pass - sim.closed_form) < 4 * (var / 20_000) ** 0.5
    assert sim.speedup(0.05) == pytest.approx(sim.tokens_per_pass / (1 + k * 0.05))


def test_simulator_rounds_and_reset():
    sim = Simulator(seed=3)
    last = sim.run(0.5, 4, 1)
    assert len(last) == 4 and sim.rounds == 1
    kept = sum(1 for v in last if v)
    assert last[:kept] == [True] * kept and (kept == 4 or last[kept] is False)
    assert all(v is None for v in last[kept + 1:])
    sim.run(0.6, 4, 1)                                  # a changed: a new tally
    assert sim.rounds == 1
    sim.run(0.6, 4, MAX_ROUNDS * 2)
    assert sim.rounds == MAX_ROUNDS and sim.full
    xs, ys = closed_form_curve(4)
    assert xs[0] == 0 and ys[0] == 1 and ys == sorted(ys)


def test_html_escapes_model_and_reader_text():
    html = chip("<img src=x onerror=alert(1)>", "accepted", 0.5, 0.25)
    assert "<img" not in html and "&lt;img" in html
    assert "min(1, p/q) = 1" in html
    assert "q = 1 (a lookup" in chip("x", "rejected", 0.2)
    assert "placeholder" in steps_html([], "measured on cpu", "Press Step")
    assert "placeholder" in reply_html([]) and "placeholder" in round_html([], 4)
    stats = engine_stats_html({"passes": 3, "tokens": 7, "tokens_per_pass": 7 / 3, "drafts": 8, "accepted": 4,
                               "a": 0.8, "acceptance_rate": 0.5, "tokens_per_verify_pass": 3.0,
                               "closed_form": expected_tokens_per_pass(0.8, 4), "k": 4}, "measured on cpu")
    assert "3.36" in stats and "0.8" in stats
    sim = Simulator()
    sim.run(0.8, 4, 1000)
    assert "rounds" in sim_stats_html(sim, 0.05, "modelled")


def test_a_count_of_one_is_singular():
    """The review read "1 target passes produced 1 tokens" and "1 tokens from one target pass"."""
    import re

    def text(html: str) -> str:
        return re.sub(r"<[^>]+>", "", html)

    one = text(engine_stats_html({"passes": 1, "tokens": 1, "tokens_per_pass": 1.0, "drafts": 0, "accepted": 0,
                                  "a": None, "acceptance_rate": None, "tokens_per_verify_pass": None,
                                  "closed_form": None, "k": 4}, "measured on cpu"))
    assert "1 target pass produced 1 token:" in one
    assert "1 token from one target pass" in text(round_html([False, None, None, None], 4))
    sim = Simulator(seed=2)
    sim.run(0.8, 4, 1)
    assert "1 round:" in text(sim_stats_html(sim, 0.05, "modelled"))
    many = text(engine_stats_html({"passes": 3, "tokens": 7, "tokens_per_pass": 7 / 3, "drafts": 8, "accepted": 4,
                                   "a": 0.8, "acceptance_rate": 0.5, "tokens_per_verify_pass": 3.0,
                                   "closed_form": 3.36, "k": 4}, "measured on cpu"))
    assert "3 target passes produced 7 tokens:" in many
    assert not re.search(r"\b1 (tokens|passes|target passes|rounds|drafts|steps)\b", one + many)


def test_saved_example_is_fresh(llm):
    import widgets.speculative_decoding.widget  # noqa: F401  (registers the example)
    assert_example_fresh("speculative-decoding", llm)


def test_the_recorded_gpu_table_shows_each_proposers_speedup_with_its_source():
    from widgets.speculative_decoding.view import recorded_html
    assert "No GPU run is recorded" in recorded_html(None)
    rows = [{"batch": b, "kind": kind, "setting": s, "tokens_per_s": 500.0 * b, "speedup": x,
             "agreement_with_plain": agree}
            for b in (1, 8) for kind in ("code", "quoting", "repetition", "prose")
            for s, x, agree in (("plain", None, None), ("ngram_k4", 1.8 if kind != "prose" else 0.95, 1.0),
                                ("early_exit_L15_k4", 1.1, 0.9), ("oracle_a10_k4", 3.2, 0.97))]
    data = {"device": "NVIDIA H200", "command": "python -m engine bench spec --record", "date": "2026-11-28",
            "results": {"rows": [{k: v for k, v in r.items() if v is not None} for r in rows], "repeat": 3,
                        "dtype": "bfloat16", "weights": "random",
                        "verify_cost": {"k": 4, "rows": [{"batch": 1, "decode_ms": 1.5, "verify_ms": 1.8, "ratio": 1.2}]}}}
    html = recorded_html(data)
    assert html.count("<tr>") == 1 + 2 * 3                      # a header, then 3 proposers at each batch
    assert ">1.80×<" in html and ">0.95×<" in html and ">3.20×<" in html
    assert "500 tokens/s at batch 1" in html and "1.80 ms against a decode step's 1.50 ms (1.20×)" in html
    assert "90% to 100% of positions" in html and "Random weights" in html
    assert "recorded on NVIDIA H200 by" in html and "median of 3 runs" in html


def test_the_engine_stats_name_the_rule_and_count_its_pauses():
    from widgets.speculative_decoding.view import engine_stats_html
    s = {"passes": 4, "tokens": 9, "drafts": 12, "accepted": 5, "a": 0.5, "acceptance_rate": 0.42,
         "tokens_per_pass": 2.25, "tokens_per_verify_pass": 2.0, "closed_form": 1.9, "k": 4,
         "rule": {"disable_by_batch_size": 64, "min_acceptance": 0.25, "probe_drafts": 8, "pause_tokens": 32,
                  "steps_off_by_batch": 0, "pauses": 1}}
    html = engine_stats_html(s, "measured on cpu")
    assert "more than 64 requests" in html and "window of 8 judged drafts can no longer keep 25%" in html
    assert "next 32 tokens plainly, each pause twice the last" in html and ">1 pause</span> here" in html
    costly = engine_stats_html({**s, "rule": {**s["rule"], "threshold": 0.775}}, "measured on cpu")
    assert "can no longer keep 78%" in costly           # a costly drafter's bar, its break-even, is the one said
    assert "The rule" not in engine_stats_html({**s, "rule": None}, "measured on cpu")
