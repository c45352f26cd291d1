"""No form of prompt input is silently reinterpreted (issue 29): random dicts, lists and ids given to
LLM.generate either run as the documented form they are, or are refused with a ValueError or TypeError."""
from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")     # a machine without it (the GPU box) skips this module

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import LLM, SamplingParams
from tests.helpers.tiny import TINY, tiny_model_folder

GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory, one_torch_thread):
    llm = LLM(model=str(tiny_model_folder(tmp_path_factory.mktemp("tiny") / "model")), device="cpu")
    yield llm
    llm.close()


ids_st = st.lists(st.integers(-3, TINY.vocab_size + 3), max_size=6)
value_st = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.text(max_size=8), ids_st,
                     st.tuples(st.integers(0, 10)), st.floats(allow_nan=False))
dict_st = st.dictionaries(st.sampled_from(["prompt", "prompt_token_ids", "prompt_ids", "text", "multi_modal_data"]),
                          value_st, max_size=3)
one_st = st.one_of(st.text(max_size=12), dict_st, value_st)
prompts_st = st.one_of(one_st, st.lists(one_st, max_size=4), st.tuples(one_st, one_st))


def documented(prompts, tokenizer, vocab: int):
    """What issue 29 says `prompts` means: a list of (token ids, reported text), or None if it is no form of
    prompt input (then it must be refused)."""
    def one(p):
        if isinstance(p, str):
            return (tokenizer.encode_ids(p), p) if p else None
        if not isinstance(p, dict) or not p or set(p) - {"prompt", "prompt_token_ids"}:
            return None
        if "prompt" in p and not isinstance(p["prompt"], str):
            return None
        if "prompt_token_ids" not in p:
            return (tokenizer.encode_ids(p["prompt"]), p["prompt"]) if p["prompt"] else None
        ids = p["prompt_token_ids"]
        if not isinstance(ids, (list, tuple)) or not ids or any(
                type(t) is not int or not 0 <= t < vocab for t in ids):
            return None
        return list(ids), p.get("prompt")
    items = [prompts] if isinstance(prompts, (str, dict)) else prompts if isinstance(prompts, (list, tuple)) else None
    if items is None:
        return None
    parsed = [one(p) for p in items]
    return None if any(p is None for p in parsed) else parsed


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=prompts_st)
def test_any_input_runs_as_documented_or_is_refused(tiny_llm, prompts):
    want = documented(prompts, tiny_llm.tokenizer, TINY.vocab_size)
    sp = SamplingParams(max_tokens=1, **GREEDY)
    if want is None:
        with pytest.raises((ValueError, TypeError)):
            tiny_llm.generate(prompts, sp)
    else:
        outs = tiny_llm.generate(prompts, sp)
        assert [(o.prompt_token_ids, o.prompt) for o in outs] == want
        assert all(len(o.outputs) == 1 and len(o.outputs[0].token_ids) == 1 for o in outs)



def test_the_oracle_knows_both_outcomes(tiny_llm):
    """The property is only as good as its oracle: it accepts the documented forms and refuses the rest."""
    tok, v = tiny_llm.tokenizer, TINY.vocab_size
    assert documented(["a", {"prompt": "b"}, {"prompt_token_ids": (1, 2), "prompt": "c"}], tok, v) == \
        [(tok.encode_ids("a"), "a"), (tok.encode_ids("b"), "b"), ([1, 2], "c")]
    for bad in ([1, 2], {"prompt_token_ids": [v]}, {"prompt": "a", "text": "b"}, "", {"prompt_token_ids": [True]}, 3):
        assert documented(bad, tok, v) is None
