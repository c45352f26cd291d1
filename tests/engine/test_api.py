"""vLLM's offline API, called the way vLLM's own offline examples call it (issue 29's table, row by row):
prompt forms, sampling_params one or per prompt, use_tqdm, chat, n > 1, seeds, stop strings and tokens,
min_tokens, penalties, logit_bias, logprobs, what is refused and how. The tiny random model is loaded
through the front door from a Hugging Face folder (tests/helpers/tiny.py), so every path is the real one;
the real model only answers where the words must mean something."""
from __future__ import annotations

import copy
import math
from typing import ClassVar

import pytest
import torch

from engine import LLM, SamplingParams
from engine.model.llama import ContiguousKV
from engine.sampling_params import NOT_SUPPORTED
from engine.unpaged import unpaged_generate
from tests.helpers.tiny import TINY, TINY_EOS, tiny_model_folder

GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tiny_llm(tiny_path, one_torch_thread):
    llm = LLM(model=str(tiny_path), device="cpu", seed=0)
    yield llm
    llm.close()


def no_leak(tiny_llm) -> bool:
    return tiny_llm.allocator_state().num_free == tiny_llm.engine.block_manager.num_blocks


# -- the float64 reference: the model's own logits, recomputed in double precision ---------------------
@pytest.fixture(scope="module")
def model64(tiny_llm):
    return copy.deepcopy(tiny_llm.model).double()


def ref_logprobs(model64, token_ids: list[int]) -> torch.Tensor:
    """log_softmax (float64) of the logits at every position of `token_ids`: row j predicts token j + 1."""
    with torch.inference_mode():
        ids = torch.tensor(token_ids)
        hidden = model64(ids, torch.arange(len(ids)), ContiguousKV(model64.config.num_layers))
        weight = model64.embed.weight if model64.lm_head is None else model64.lm_head.weight
        return torch.log_softmax(hidden @ weight.T, dim=-1)


def logprob_tolerance(cfg) -> float:
    """How far the engine's float32 log-probabilities may sit from the float64 ones. Each logit is the end of
    dot products accumulated in float32 over at most n = hidden + intermediate terms per layer, through
    every layer and the LM head; rounding error in a sum of n terms is bounded by n*u times the sum of the
    terms' magnitudes (u = 2^-24). With weights of std 0.02 after RMSNorm, the terms' magnitudes sum to
    below 1 per dot product, so the logit error stays under L*n*u, and log_softmax in float32 adds a few u
    times (|logit| + log V) more. Doubled for the margin between a bound's constants and this estimate."""
    u = 2.0 ** -24
    n = cfg.hidden_size + cfg.intermediate_size
    return 2 * ((cfg.num_layers + 1) * n * u + 4 * u * (1 + math.log(cfg.vocab_size)))


# -- prompts: every form vLLM's examples use, none reinterpreted ------------------------------------
def test_each_prompt_form_runs_as_the_tokens_it_names(tiny_llm):
    ids = tiny_llm.tokenizer.encode_ids("Hello, my name is")
    sp = SamplingParams(max_tokens=5, **GREEDY)
    want = unpaged_generate(tiny_llm.model, ids, 5)
    forms = ["Hello, my name is", {"prompt": "Hello, my name is"}, {"prompt_token_ids": ids},
             {"prompt_token_ids": ids, "prompt": "its text"}]
    outs = tiny_llm.generate(forms, sampling_params=sp)
    assert [o.prompt for o in outs] == ["Hello, my name is", "Hello, my name is", None, "its text"]
    assert all(o.prompt_token_ids == ids and o.finished for o in outs)
    assert all(len(o.outputs) == 1 and o.outputs[0].token_ids == want for o in outs)
    one = tiny_llm.generate("Hello, my name is", sp)                      # a bare string: a list of one
    assert len(one) == 1 and one[0].outputs[0].token_ids == want
    assert tiny_llm.generate([], sp) == []
    assert no_leak(tiny_llm)


def test_sampling_params_one_for_all_a_list_one_per_prompt_or_vllms_defaults(tiny_llm):
    prompts = ["a", "bb", "ccc"]
    per_prompt = [SamplingParams(max_tokens=k, **GREEDY) for k in (1, 2, 3)]
    outs = tiny_llm.generate(prompts, sampling_params=per_prompt)
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 2, 3]
    assert [o.outputs[0].finish_reason for o in outs] == ["length"] * 3
    default = tiny_llm.get_default_sampling_params()
    assert default == SamplingParams() and default.max_tokens == 16 and default.temperature == 1.0
    assert default.top_k in (0, -1) and default.n == 1 and default.logprobs is None
    for out in tiny_llm.generate(prompts):                                # None: vLLM's defaults, 16 tokens at most
        c = out.outputs[0]
        assert (len(c.token_ids) == 16 and c.finish_reason == "length") or \
            (c.token_ids[-1] == TINY_EOS and c.finish_reason == "stop")
    with pytest.raises(ValueError, match="sampling_params: 2 SamplingParams for 3 prompts"):
        tiny_llm.generate(prompts, per_prompt[:2])
    with pytest.raises(TypeError, match=r"sampling_params\[1\]"):
        tiny_llm.generate(prompts[:2], [per_prompt[0], {"max_tokens": 2}])
    sp = SamplingParams(max_tokens=8, **GREEDY)
    sp.max_tokens = 0                                   # set after construction, as vLLM's generate.py does
    with pytest.raises(ValueError, match="max_tokens"):
        tiny_llm.generate("a", sp)
    assert no_leak(tiny_llm)


def test_max_tokens_none_writes_until_the_context_is_full(tiny_path):
    small = LLM(model=str(tiny_path), device="cpu", max_model_len=40)
    try:
        out = small.generate("twelve chars", SamplingParams(max_tokens=None, **GREEDY))[0]
        assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 40
        assert out.outputs[0].finish_reason == "length"
    finally:
        small.close()


def test_use_tqdm_shows_a_bar_or_drives_the_class_given(tiny_llm, capsys):
    tiny_llm.generate(["a", "b"], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=True)
    assert "Processed prompts" in capsys.readouterr().err

    class Counter:
        made: ClassVar[list] = []

        def __init__(self, total, **kwargs):
            self.total, self.n, self.closed = total, 0, False
            Counter.made.append(self)

        def update(self, k=1):
            self.n += k

        def close(self):
            self.closed = True

    tiny_llm.generate(["a", "b", "c"], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=Counter)
    bar, = Counter.made
    assert bar.total == 3 and bar.n == 3 and bar.closed
    tiny_llm.generate(["a"], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=False)
    assert capsys.readouterr().err == ""


# -- chat, the tokenizer ----------------------------------------------------------------------------
def test_chat_renders_the_models_template_and_continues_it(tiny_llm):
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    out, = tiny_llm.chat(conversation, SamplingParams(max_tokens=4, **GREEDY))
    assert out.prompt == "<system>Be brief.\n<user>Hi\n<assistant>"            # TINY_CHAT_TEMPLATE
    assert out.prompt_token_ids == tiny_llm.get_tokenizer().encode_ids(out.prompt)
    assert out.outputs[0].token_ids == unpaged_generate(tiny_llm.model, out.prompt_token_ids, 4)
    two = tiny_llm.chat([conversation, [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]],
                   SamplingParams(max_tokens=2, **GREEDY))
    assert [o.prompt for o in two] == [out.prompt, "<user>Hi\n<assistant>"]
    with pytest.raises(ValueError, match=r"messages\[1\]\['role'\]"):
        tiny_llm.chat([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    with pytest.raises(ValueError, match=r"messages\[0\]: unknown key\(s\) 'name'"):
        tiny_llm.chat([{"role": "user", "content": "a", "name": "x"}])
    with pytest.raises(ValueError, match=r"messages\[0\]\['content'\]\[0\]"):
        tiny_llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}])
    assert no_leak(tiny_llm)


# -- n > 1 ----------------------------------------------------------------------------------------
def test_n_completions_come_in_one_request_output_over_one_prefill(tiny_llm):
    prompt = "the same prompt for every sample"
    start = tiny_llm.engine.trace.num_steps
    outs = tiny_llm.generate([prompt, "another"], SamplingParams(n=3, temperature=1.0, max_tokens=6, ignore_eos=True))
    assert len(outs) == 2 and all([c.index for c in o.outputs] == [0, 1, 2] for o in outs)
    assert all(len(c.token_ids) == 6 and c.finish_reason == "length" for o in outs for c in o.outputs)
    assert len({tuple(c.token_ids) for c in outs[0].outputs}) > 1                # they are separate draws
    prefilled = sum(e.num_tokens for r in tiny_llm.trace_since(start) for e in r.entries
                    if e.kind == "prefill" and e.request_id == outs[0].request_id)
    assert prefilled <= len(outs[0].prompt_token_ids)                           # the prompt once, not three times
    greedy = tiny_llm.generate(prompt, SamplingParams(n=2, max_tokens=5, **GREEDY))[0]
    assert [c.token_ids for c in greedy.outputs] == [unpaged_generate(tiny_llm.model, greedy.prompt_token_ids, 5)] * 2
    assert no_leak(tiny_llm)


# -- seeds ----------------------------------------------------------------------------------------
def test_llm_seed_makes_a_run_reproducible_and_a_request_seed_its_own_draws(tiny_path, tiny_llm):
    prompts = ["one", "two", "three"]
    sp = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)

    def run(seed):
        other = LLM(model=str(tiny_path), device="cpu", seed=seed)
        try:
            return [o.outputs[0].token_ids for o in other.generate(prompts, sp)]
        finally:
            other.close()
    first = run(7)
    assert run(7) == first                      # the same script, a fresh engine: the same text
    assert run(8) != first
    seeded = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=42)
    alone = tiny_llm.generate("one", seeded)[0].outputs[0].token_ids
    batched = tiny_llm.generate(["one", "x", "y"], [seeded, sp, sp])[0].outputs[0].token_ids
    assert batched == alone                     # a request's own seed: its companions change nothing


# -- when a completion ends -------------------------------------------------------------------------
SAMPLED = {"temperature": 1.0, "seed": 5, "ignore_eos": True}   # the tiny model's greedy text repeats one byte


def test_stop_string_cuts_the_text_before_it_and_names_itself(tiny_llm):
    free = tiny_llm.generate("stop here", SamplingParams(max_tokens=32, **SAMPLED))[0].outputs[0]
    text = free.text
    # two printable characters of the free run (two tokens: the string straddles them), first seen at `at`
    at = next(i for i in range(2, len(text) - 1) if all(c.isprintable() and c != "\ufffd" for c in text[i:i + 2])
              and text[i:i + 2] not in text[:i + 1])
    stop = text[at:at + 2]
    out = tiny_llm.generate("stop here", SamplingParams(max_tokens=32, stop=["never there", stop],
                                                        **SAMPLED))[0].outputs[0]
    assert out.text == text[:at] and out.finish_reason == "stop" and out.stop_reason == stop
    assert free.token_ids[:len(out.token_ids)] == out.token_ids and len(out.token_ids) < 32


def test_stop_token_ids_end_the_completion_and_are_kept_in_its_tokens(tiny_llm):
    tokens = tiny_llm.generate("stop token", SamplingParams(max_tokens=16, **SAMPLED))[0].outputs[0].token_ids
    stop = tokens[5]
    first = tokens.index(stop)
    out = tiny_llm.generate("stop token", SamplingParams(max_tokens=16, stop_token_ids=[stop],
                                                         **SAMPLED))[0].outputs[0]
    assert out.token_ids == tokens[:first + 1] and out.finish_reason == "stop" and out.stop_reason == stop


def test_min_tokens_holds_off_eos_and_stop_tokens(tiny_llm):
    forced_eos = {TINY_EOS: 100.0}             # the largest bias allowed: EOS is always the argmax
    out = tiny_llm.generate("x", SamplingParams(temperature=0.0, max_tokens=10, logit_bias=forced_eos))[0].outputs[0]
    assert out.token_ids == [TINY_EOS] and out.finish_reason == "stop" and out.stop_reason is None
    held = tiny_llm.generate("x", SamplingParams(temperature=0.0, max_tokens=10, min_tokens=4,
                                            logit_bias=forced_eos))[0].outputs[0]
    assert len(held.token_ids) == 5 and held.token_ids[-1] == TINY_EOS and TINY_EOS not in held.token_ids[:4]
    assert held.finish_reason == "stop"
    stop = 65
    held = tiny_llm.generate("x", SamplingParams(temperature=0.0, max_tokens=10, min_tokens=3, stop_token_ids=[stop],
                                            logit_bias={stop: 100.0}, ignore_eos=True))[0].outputs[0]
    assert len(held.token_ids) == 4 and held.token_ids[-1] == stop and stop not in held.token_ids[:3]
    assert held.stop_reason == stop
    # sampled rows honour the ban too: temperature 1 with EOS forced still writes min_tokens first
    sampled = tiny_llm.generate("x", SamplingParams(temperature=1.0, max_tokens=10, min_tokens=6,
                                               logit_bias=forced_eos))[0].outputs[0]
    assert len(sampled.token_ids) == 7 and sampled.token_ids[-1] == TINY_EOS


# -- what shapes the logits ---------------------------------------------------------------------------
def penalized(logits: torch.Tensor, prompt: list[int], output: list[int], sp: SamplingParams) -> torch.Tensor:
    """vLLM's penalties, written out plainly in float64 (the test's own reading of the definitions)."""
    x = logits.clone()
    counts = torch.zeros_like(x)
    for t in output:
        counts[t] += 1
    seen = counts > 0
    seen[prompt] = True
    r = sp.repetition_penalty
    x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    return x - sp.frequency_penalty * counts - sp.presence_penalty * (counts > 0).double()


@pytest.mark.parametrize("penalty", [{"repetition_penalty": 1.8}, {"frequency_penalty": 1.5},
                                     {"presence_penalty": 1.5},
                                     {"repetition_penalty": 1.3, "frequency_penalty": 0.7, "presence_penalty": -0.5}])
def test_penalties_pick_the_argmax_of_the_penalized_logits(tiny_llm, model64, penalty):
    prompt = tiny_llm.tokenizer.encode_ids("aaaa abab")
    sp = SamplingParams(max_tokens=12, **GREEDY, **penalty)
    out = tiny_llm.generate({"prompt_token_ids": prompt}, sp)[0].outputs[0]
    plain = unpaged_generate(tiny_llm.model, prompt, 12)
    tol = logprob_tolerance(TINY)
    for j, token in enumerate(out.token_ids):
        with torch.inference_mode():
            ids = torch.tensor(prompt + out.token_ids[:j])
            h = model64(ids, torch.arange(len(ids)), ContiguousKV(TINY.num_layers))[-1]
            row = penalized(h @ model64.embed.weight.T, prompt, out.token_ids[:j], sp)
        assert row[token] >= row.max() - tol * (1 + row.abs().max()), f"step {j}: not the penalized argmax"
    assert out.token_ids != plain                 # the penalty changed what greedy writes


def test_logit_bias_adds_to_the_logits_before_the_choice(tiny_llm):
    plain = unpaged_generate(tiny_llm.model, tiny_llm.tokenizer.encode_ids("bias"), 4)
    pushed = tiny_llm.generate("bias", SamplingParams(max_tokens=4, logit_bias={66: 100.0}, **GREEDY))[0].outputs[0]
    assert pushed.token_ids == [66] * 4
    banned = tiny_llm.generate("bias", SamplingParams(max_tokens=1, logit_bias={plain[0]: -100.0}, **GREEDY))[0]
    assert banned.outputs[0].token_ids != plain[:1]
    with pytest.raises(ValueError, match="logit_bias keys: 256 is outside the vocabulary"):
        tiny_llm.generate("bias", SamplingParams(max_tokens=1, logit_bias={256: 1.0}))
    with pytest.raises(ValueError, match=r"logit_bias\[3\]"):
        SamplingParams(logit_bias={3: 101.0})


# -- logprobs ------------------------------------------------------------------------------------------
def check_position(got: dict, token: int, ref: torch.Tensor, k: int, tol: float) -> None:
    """One position's dict against the float64 log_softmax row `ref`: the token that came, then the top k."""
    assert next(iter(got)) == token and len(got) in (k, k + 1)
    # its rank: 1 + the tokens surely above it; at most 1 + those maybe above it (ties within the tolerance)
    surely, maybe = int((ref > ref[token] + 2 * tol).sum()), int((ref > ref[token] - 2 * tol).sum())
    assert 1 + surely <= got[token].rank <= 1 + maybe
    top = {t: v for t, v in got.items() if t != token}
    assert len({v.rank for v in top.values()}) == len(top) and all(1 <= v.rank <= k for v in top.values())
    kth = float(ref.topk(k).values[-1]) if k else math.inf
    for t, v in got.items():
        assert abs(v.logprob - float(ref[t])) <= tol
        assert v.decoded_token == (chr(t) if t < 128 else "\ufffd")   # a byte alone: ASCII, or half a character
        if t != token:
            assert float(ref[t]) >= kth - 2 * tol          # one of the k most likely, up to ties


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logprobs_are_the_models_own_log_softmax(tiny_llm, model64, temperature):
    k, tol = 5, logprob_tolerance(TINY)
    sp = SamplingParams(temperature=temperature, max_tokens=8, logprobs=k, prompt_logprobs=3, ignore_eos=True, seed=1)
    out = tiny_llm.generate("logprobs, please", sp)[0]
    c = out.outputs[0]
    ref = ref_logprobs(model64, out.prompt_token_ids + c.token_ids)
    n = len(out.prompt_token_ids)
    assert len(c.logprobs) == len(c.token_ids)
    for j, (token, got) in enumerate(zip(c.token_ids, c.logprobs)):
        check_position(got, token, ref[n - 1 + j], k, tol)
    assert abs(c.cumulative_logprob - sum(float(ref[n - 1 + j, t]) for j, t in enumerate(c.token_ids))) \
        <= tol * len(c.token_ids)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == n
    for j in range(1, n):
        check_position(out.prompt_logprobs[j], out.prompt_token_ids[j], ref[j - 1], 3, tol)
    plain = tiny_llm.generate("logprobs, please", SamplingParams(temperature=temperature, max_tokens=8, ignore_eos=True,
                                                            seed=1))[0]
    assert plain.outputs[0].token_ids == c.token_ids          # asking for logprobs changes no draw
    assert plain.outputs[0].logprobs is None and plain.outputs[0].cumulative_logprob is None
    assert plain.prompt_logprobs is None


def test_logprobs_zero_gives_only_the_chosen_token(tiny_llm, model64):
    out = tiny_llm.generate("zero", SamplingParams(max_tokens=3, logprobs=0, **GREEDY))[0].outputs[0]
    assert all(list(d) == [t] for d, t in zip(out.logprobs, out.token_ids))


# -- refusals: named, and nothing runs ---------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NOT_SUPPORTED))
def test_unsupported_sampling_params_are_refused_by_name(name):
    default = NOT_SUPPORTED[name]
    other = {None: [1], False: True, True: False}.get(default, "x") if not isinstance(default, int) or \
        isinstance(default, bool) else default + 1
    if name == "best_of":
        other = 3
    with pytest.raises(ValueError, match=name):
        SamplingParams(**{name: other})
    SamplingParams(**{name: default})                 # spelling out the default is fine


@pytest.mark.parametrize("kwargs, field", [
    ({"logprobs": -1}, "logprobs"), ({"prompt_logprobs": 21}, "prompt_logprobs"), ({"top_k": -2}, "top_k"),
    ({"max_tokens": 0}, "max_tokens"), ({"min_tokens": 5, "max_tokens": 4}, "min_tokens"),
    ({"presence_penalty": 2.5}, "presence_penalty"), ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"stop_token_ids": [-1]}, r"stop_token_ids\[0\]"), ({"stop": [""]}, r"stop\[0\]"),
    ({"temperature": -0.1}, "temperature"), ({"n": 0}, "n"), ({"seed": 1.5}, "seed"),
])
def test_out_of_range_sampling_params_are_refused_naming_the_field(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=field):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("prompts, error, where", [
    ({"prompt_ids": [1, 2]}, ValueError, r"prompts: unknown key\(s\) 'prompt_ids'"),
    (["fine", {"prompt_token_ids": [1, 2, 256]}], ValueError, r"prompts\[1\]\['prompt_token_ids'\]\[2\]: 256"),
    ({"prompt_token_ids": [1, -1]}, ValueError, r"\['prompt_token_ids'\]\[1\]"),
    ({"prompt_token_ids": [1, True]}, TypeError, r"\['prompt_token_ids'\]\[1\]"),
    ({"prompt_token_ids": []}, ValueError, r"\['prompt_token_ids'\] is empty"),
    ({"prompt_token_ids": "1 2"}, TypeError, r"\['prompt_token_ids'\] must be a list"),
    ("", ValueError, "prompts is empty"),
    (["ok", ""], ValueError, r"prompts\[1\] is empty"),
    ({"prompt": 5}, TypeError, r"\['prompt'\] must be a string"),
    ({"prompt": None, "prompt_token_ids": [1]}, TypeError, r"\['prompt'\] must be a string"),
    ({}, ValueError, "needs 'prompt'"),
    ([1, 2, 3], TypeError, r"prompts\[0\].*prompt_token_ids"),
    (42, TypeError, "prompts must be"),
    (None, TypeError, "prompts must be"),
    (["x" * 3000], ValueError, r"prompts is 3000 tokens long.*max_model_len"),
])
def test_bad_prompts_are_refused_naming_the_field_and_nothing_runs(tiny_llm, prompts, error, where):
    steps = tiny_llm.engine.trace.num_steps
    with pytest.raises(error, match=where):
        tiny_llm.generate(prompts, SamplingParams(max_tokens=2))
    assert tiny_llm.engine.trace.num_steps == steps and no_leak(tiny_llm)


def test_a_prompt_that_leaves_no_room_for_max_tokens_is_refused(tiny_llm):
    n = tiny_llm.engine.max_model_len - 4
    with pytest.raises(ValueError, match=r"with max_tokens=8 it exceeds the engine's context"):
        tiny_llm.generate({"prompt_token_ids": [1] * n}, SamplingParams(max_tokens=8))


# -- the real model: vLLM's basic example, as written ------------------------------------------------
def test_vllms_basic_example_runs_on_the_real_model(llm):
    real = llm
    prompts = ["Hello, my name is", "The president of the United States is", "The capital of France is",
               "The future of AI is"]
    sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
    outputs = real.generate(prompts, sampling_params)
    for output in outputs:
        prompt, generated_text = output.prompt, output.outputs[0].text
        assert prompt in prompts and isinstance(generated_text, str)
        assert 1 <= len(output.outputs[0].token_ids) <= 16
    greedy = real.generate("The capital of France is", SamplingParams(temperature=0.0, max_tokens=4, logprobs=1))
    first = greedy[0].outputs[0]
    assert "Paris" in first.text and first.logprobs[0][first.token_ids[0]].rank == 1


def test_the_default_models_hugging_face_id_names_the_embedded_default(tmp_path, monkeypatch):
    """vLLM's examples name a model by its Hugging Face id; ours, the embedded default, answers to its id and
    to the names /v1/models lists, while a folder that exists under such a name is still read as a folder."""
    from engine.config import DEFAULT_MODEL_NAMES, EngineConfig
    for name in ("HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1"):
        assert name in DEFAULT_MODEL_NAMES and EngineConfig(model=name).model is None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SmolLM2-135M-Instruct").mkdir()
    assert EngineConfig(model="SmolLM2-135M-Instruct").model == "SmolLM2-135M-Instruct"
    assert EngineConfig(model="HuggingFaceTB/SmolLM2-360M").model == "HuggingFaceTB/SmolLM2-360M"   # no alias
