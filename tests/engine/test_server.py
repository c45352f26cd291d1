"""The OpenAI-compatible server (engine/serve), driven by the official `openai` client the way its users
call vLLM's server: models, completions, chat, streaming, an abort mid-stream (the request's KV blocks are
freed, read from the engine's own allocator), bad requests (400 naming the field), the API key (401), a
full queue (429 with Retry-After), and `python -m engine serve` on its own. The tiny random model is
loaded through the front door from a Hugging Face folder; the real model answers one question at the end.
Every wait is for a condition, with a deadline."""
from __future__ import annotations

import http.client
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from tests.helpers.tiny import tiny_model_folder

pytest.importorskip("tornado")          # the GPU machine's bare environment has neither
openai = pytest.importorskip("openai")

from engine.serve import ApiServer, ServerLimits     # after the skips: it imports tornado

KEY = "sk-test-key"
ROOT = Path(__file__).resolve().parents[2]
GREEDY = {"temperature": 0.0}
NO_EOS = {"ignore_eos": True}             # vLLM's extra field: the tiny model's gibberish must not stop early


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("tiny") / "tiny-model")


@pytest.fixture(scope="module")
def tiny_llm(tiny_path, one_torch_thread):
    llm = LLM(model=str(tiny_path), device="cpu", seed=0)
    yield llm
    llm.close()


class Tracebacks(logging.Handler):
    """Log records that carry a traceback (the server's log must have none for a client's mistake)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@pytest.fixture(scope="module")
def api(tiny_llm):
    tracebacks = Tracebacks()
    logging.getLogger().addHandler(tracebacks)
    server = ApiServer(tiny_llm, port=0, api_key=KEY).start()
    server.tracebacks = tracebacks.records
    yield server
    server.stop()
    logging.getLogger().removeHandler(tracebacks)
    expected = [r for r in tracebacks.records if "deliberately" in str(r.exc_info[1])]
    assert len(tracebacks.records) == len(expected), [r.getMessage() for r in tracebacks.records]


@pytest.fixture(scope="module")
def client(api):
    return openai.OpenAI(base_url=api.url, api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(tiny_llm):
    return tiny_llm.config.name


def wait_for(condition, timeout: float = 60.0, what: str = "the condition") -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    wake = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        wake.wait(0.005)


def idle_and_no_leak(llm) -> bool:
    """Nothing running or waiting, and every KV block free (cached prefix blocks count as free), read from
    the engine's own allocator between two steps."""
    state = llm.allocator_state()
    return not state.tables and state.num_free == llm.engine.block_manager.num_blocks


def raw(api, method: str, path: str, body=None, key: str | None = KEY):
    """One request with http.client: status, JSON body, headers."""
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    assert "Traceback" not in text
    return resp.status, json.loads(text) if text else {}, resp.headers      # headers: case-insensitive


# -- models, completions, chat ------------------------------------------------------------------------
def test_models_lists_the_served_model(api, client, tiny_llm, model):
    assert raw(api, "GET", "/health", key=None)[0] == 200        # no key needed to ask whether it is up
    models = client.models.list()
    assert [m.id for m in models.data] == [model]
    assert models.data[0].max_model_len == tiny_llm.engine.max_model_len


def test_completion_is_what_the_offline_api_writes(client, tiny_llm, model):
    sp = SamplingParams(max_tokens=12, **GREEDY, **NO_EOS)
    offline = tiny_llm.generate("The capital of France is", sp)[0]
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12, **GREEDY,
                                  extra_body=NO_EOS)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == model
    [choice] = r.choices
    assert choice.text == offline.outputs[0].text
    assert choice.finish_reason == "length" and choice.index == 0
    assert r.usage.prompt_tokens == len(offline.prompt_token_ids)
    assert r.usage.completion_tokens == 12 and r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_several_prompts_token_ids_and_n_give_one_choice_each(client, tiny_llm, model):
    ids = tiny_llm.tokenizer.encode_ids("Hello there")
    sp = SamplingParams(max_tokens=6, **GREEDY, **NO_EOS)
    expected = [o.outputs[0].text for o in tiny_llm.generate(["Once upon", {"prompt_token_ids": ids}], sp)]
    r = client.completions.create(model=model, prompt=["Once upon", "Hello there"], max_tokens=6, **GREEDY,
                                  extra_body=NO_EOS)
    assert [c.text for c in sorted(r.choices, key=lambda c: c.index)] == expected
    r = client.completions.create(model=model, prompt=ids, max_tokens=6, **GREEDY, extra_body=NO_EOS)
    assert [c.text for c in r.choices] == expected[1:]
    assert r.usage.prompt_tokens == len(ids)
    # n = 2 for each of two prompts: choices 0, 1 (first prompt) and 2, 3 (second), OpenAI's numbering
    r = client.completions.create(model=model, prompt=["Once upon", "Hello there"], max_tokens=6, n=2, seed=3,
                                  extra_body=NO_EOS)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert r.usage.completion_tokens == 4 * 6


def test_chat_is_what_llm_chat_writes(client, tiny_llm, model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}]
    offline = tiny_llm.chat(messages, SamplingParams(max_tokens=10, **GREEDY, **NO_EOS))[0]
    r = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=10, **GREEDY,
                                       extra_body=NO_EOS)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    [choice] = r.choices
    assert choice.message.role == "assistant" and choice.message.content == offline.outputs[0].text
    assert choice.finish_reason == "length"
    assert r.usage.prompt_tokens == len(offline.prompt_token_ids) and r.usage.completion_tokens == 10


def test_stop_strings_seeds_and_logprobs(client, tiny_llm, model):
    # the same seed gives the same sample
    sampled = dict(model=model, prompt="abc", max_tokens=16, temperature=1.0, seed=5, extra_body=NO_EOS)
    text = client.completions.create(**sampled).choices[0].text
    assert client.completions.create(**sampled).choices[0].text == text
    # a stop string: the first character that is new at its place ends the text there (not included)
    k = next(i for i in range(1, len(text)) if text[i] not in text[:i] and text[i] != "\ufffd")
    r = client.completions.create(**sampled, stop=[text[k]])
    assert r.choices[0].text == text[:k]
    assert r.choices[0].finish_reason == "stop" and r.choices[0].stop_reason == text[k]
    streamed = list(client.completions.create(**sampled, stop=[text[k]], stream=True))   # held-back text included
    assert "".join(c.choices[0].text for c in streamed) == text[:k] and streamed[-1].choices[0].finish_reason == "stop"
    # logprobs: the chosen token's and the top 3, as the offline API computes them
    offline = tiny_llm.generate("abc", SamplingParams(max_tokens=4, logprobs=3, **GREEDY, **NO_EOS))[0].outputs[0]
    lp = client.completions.create(model=model, prompt="abc", max_tokens=4, logprobs=3, **GREEDY,
                                   extra_body=NO_EOS).choices[0].logprobs
    want = [entry[t].logprob for entry, t in zip(offline.logprobs, offline.token_ids)]
    assert lp.token_logprobs == pytest.approx(want)
    assert all(len(top) <= 3 for top in lp.top_logprobs) and len(lp.tokens) == 4
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                          logprobs=True, top_logprobs=2, extra_body=NO_EOS)
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(c.top_logprobs) == 2 for c in content)
    assert all(c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob for c in content)


# -- streaming -------------------------------------------------------------------------------------------
def test_a_streamed_completion_joins_to_the_whole_one(client, model):
    whole = client.completions.create(model=model, prompt="Stream me", max_tokens=10, **GREEDY, extra_body=NO_EOS)
    chunks = list(client.completions.create(model=model, prompt="Stream me", max_tokens=10, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY, extra_body=NO_EOS))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) <= {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_streamed_chat_sends_the_role_then_the_text(client, model):
    messages = [{"role": "user", "content": "Say something"}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=8, **GREEDY, extra_body=NO_EOS)
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=8, stream=True, n=2,
                                                 **GREEDY, extra_body=NO_EOS))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    for index in (0, 1):                      # greedy: both samples write the same text
        mine = [c.choices[0] for c in chunks if c.choices[0].index == index]
        assert mine[0].delta.role == "assistant"
        assert "".join(ch.delta.content or "" for ch in mine) == whole.choices[0].message.content
        assert mine[-1].finish_reason == "length"


def test_leaving_mid_stream_aborts_the_request_and_frees_its_blocks(api, client, tiny_llm, model):
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="an idle engine")
    generated_before = tiny_llm.stats.generated
    disconnects = api.state.counts.disconnects
    max_tokens = 1500
    stream = client.completions.create(model=model, prompt="Go on and on", max_tokens=max_tokens, stream=True,
                                       extra_body=NO_EOS)
    chunks = iter(stream)
    for _ in range(3):
        next(chunks)
    assert tiny_llm.allocator_state().tables          # it holds blocks while it runs
    stream.close()                                     # the client goes away
    wait_for(lambda: api.state.counts.disconnects == disconnects + 1, what="the server to see the client leave")
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="the request's blocks to be freed")
    assert tiny_llm.stats.generated - generated_before < max_tokens      # it was stopped, not finished
    wait_for(lambda: api.state.counts.in_flight == 0, what="the handler to end")
    # the engine goes on serving
    assert client.completions.create(model=model, prompt="After", max_tokens=2, extra_body=NO_EOS).choices[0].text


def test_a_stream_begins_at_its_first_token_even_before_any_text(api, client, tiny_llm, model):
    """The 200 and its headers go out with the first token, even when that token's text is held back (here:
    all of it, since every prefix of the reply is a prefix of the stop string), so a client's timeout for
    the headers never waits on the text."""
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="an idle engine")
    held = 400
    whole = client.completions.create(model=model, prompt="Hold it", max_tokens=held, **GREEDY,
                                      extra_body=NO_EOS).choices[0].text
    generated_before = tiny_llm.stats.generated
    stream = client.completions.create(model=model, prompt="Hold it", max_tokens=1500, stream=True, **GREEDY,
                                       stop=[whole + "\u0000"], extra_body=NO_EOS)   # returns with the headers
    try:
        # before the headers came with the first chunk of text, i.e. after the 400 held-back tokens
        assert tiny_llm.stats.generated - generated_before < held
    finally:
        stream.close()
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="the request's blocks to be freed")


def test_leaving_before_a_whole_answer_aborts_it_too(api, tiny_llm, model):
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="an idle engine")
    disconnects = api.state.counts.disconnects
    body = json.dumps({"model": model, "prompt": "Long", "max_tokens": 1500, "ignore_eos": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    conn.request("POST", "/v1/completions", body=body, headers={"Authorization": f"Bearer {KEY}"})
    wait_for(lambda: tiny_llm.stats.num_running == 1, what="the request to run")
    conn.close()                                         # gone without reading the answer
    wait_for(lambda: api.state.counts.disconnects == disconnects + 1, what="the server to see the client leave")
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="the request's blocks to be freed")
    wait_for(lambda: api.state.counts.in_flight == 0, what="the handler to end")


# -- errors ------------------------------------------------------------------------------------------------
BAD = [   # (body, the field the 400 names)
    ({"prompt": "x", "top_p": 2}, "top_p"),
    ({"prompt": "x", "max_tokens": "10"}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": "x", "presence_penalty": 3}, "presence_penalty"),
    ({"prompt": "x", "logit_bias": {"not-an-id": 1}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"3": 500}}, "logit_bias"),
    ({"prompt": "x", "logprobs": 50}, "logprobs"),
    ({"prompt": "x", "stop": [1]}, "stop"),
    ({"prompt": "x", "seed": "7"}, "seed"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "frobnicate": 1}, "frobnicate"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 99999]}, "prompt"),
    ({"prompt": [[1, 2], {"a": 1}]}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({}, "prompt"),
    ({"prompt": "x", "max_tokens": 100000}, "max_tokens"),
]
BAD_CHAT = [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages"),
    ({"messages": [{"role": "user", "content": "hi", "name": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 99}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -1}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "user", "content": "hi"}], "prompt": "x"}, "prompt"),
]


@pytest.mark.parametrize("body, param", BAD, ids=[p for _, p in BAD])
def test_a_bad_completion_request_is_a_400_naming_the_field(api, model, body, param):
    status, reply, _ = raw(api, "POST", "/v1/completions", {"model": model, **body})
    assert status == 400, reply
    assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["param"] == param, reply
    assert param in reply["error"]["message"] or param in ("prompt", "messages")


@pytest.mark.parametrize("body, param", BAD_CHAT, ids=[p for _, p in BAD_CHAT])
def test_a_bad_chat_request_is_a_400_naming_the_field(api, model, body, param):
    status, reply, _ = raw(api, "POST", "/v1/chat/completions", {"model": model, **body})
    assert status == 400, reply
    assert reply["error"]["param"] == param, reply


def test_what_is_not_json_or_not_there_is_answered_in_openai_shape(api, client, tiny_llm):
    for body in (b"{not json", b"\xff\xfe", b"[1, 2]", b""):
        status, reply, _ = raw(api, "POST", "/v1/completions", body)
        assert status == 400 and reply["error"]["type"] == "invalid_request_error", (body, reply)
    status, reply, _ = raw(api, "POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"})
    assert status == 404 and reply["error"]["code"] == "model_not_found" and reply["error"]["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")
    status, reply, _ = raw(api, "GET", "/v1/embeddings")
    assert status == 404 and "error" in reply
    status, reply, _ = raw(api, "GET", "/v1/completions")
    assert status == 405 and "error" in reply
    # the engine's own refusal at submission (more samples than can ever run together) is a 400 too
    status, reply, _ = raw(api, "POST", "/v1/completions", {"prompt": "x", "n": 10_000, "max_tokens": 1})
    assert status == 400 and "max_num_seqs" in reply["error"]["message"]
    wait_for(lambda: idle_and_no_leak(tiny_llm), what="an idle engine")


def test_a_fault_in_the_server_is_a_500_with_one_sentence(api, monkeypatch):
    def broken(llm):
        raise RuntimeError("deliberately broken")
    monkeypatch.setattr(api.state, "model_limits", broken)
    status, reply, _ = raw(api, "POST", "/v1/completions", {"prompt": "x"})
    assert status == 500 and reply["error"]["type"] == "server_error"
    assert "deliberately" not in reply["error"]["message"]           # the details stay in the server's log
    assert any("deliberately" in str(r.exc_info[1]) for r in api.tracebacks)


def test_the_api_key_is_required_when_set(api, model):
    for key in (None, "sk-wrong", ""):
        status, reply, headers = raw(api, "GET", "/v1/models", key=key)
        assert status == 401 and reply["error"]["code"] == "invalid_api_key"
        assert headers.get("WWW-Authenticate") == "Bearer"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=api.url, api_key="sk-wrong", max_retries=0).completions.create(model=model, prompt="x")
    assert raw(api, "GET", "/v1/models")[0] == 200


def test_a_full_queue_is_a_429_with_retry_after(tiny_llm, model):
    busy = ApiServer(tiny_llm, port=0, limits=ServerLimits(max_concurrent=1, retry_after_s=2)).start()
    try:
        c = openai.OpenAI(base_url=busy.url, api_key="unused", max_retries=0, timeout=120)
        stream = c.completions.create(model=model, prompt="Busy", max_tokens=1500, stream=True, extra_body=NO_EOS)
        next(iter(stream))                                  # it runs
        status, reply, headers = raw(busy, "POST", "/v1/completions", {"prompt": "x"}, key=None)
        assert status == 429 and headers.get("Retry-After") == "2", reply
        assert reply["error"]["type"] == "rate_limit_error"
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
        stream.close()
        wait_for(lambda: busy.state.counts.in_flight == 0 and idle_and_no_leak(tiny_llm), what="the slot to free")
        assert c.completions.create(model=model, prompt="Now", max_tokens=2).choices   # admitted again
    finally:
        busy.stop()


def test_a_prompt_past_the_servers_length_limit_is_a_400_naming_it(tiny_llm, model):
    short = ApiServer(tiny_llm, port=0, limits=ServerLimits(max_prompt_tokens=4)).start()
    try:
        c = openai.OpenAI(base_url=short.url, api_key="unused", max_retries=0, timeout=120)
        with pytest.raises(openai.BadRequestError, match="5 tokens long: this server takes prompts of at most 4") as e:
            c.completions.create(model=model, prompt=[1, 2, 3, 4, 5], max_tokens=1)
        assert e.value.body["param"] == "prompt"
        assert c.completions.create(model=model, prompt=[1, 2, 3, 4], max_tokens=1, extra_body=NO_EOS).choices
    finally:
        short.stop()
    with pytest.raises(ValueError, match="max_prompt_tokens must be a positive integer"):
        ServerLimits(max_prompt_tokens=0)


def test_a_full_engine_queue_is_a_429_too():
    """The shared engine's waiting queue counts every caller's requests (in the Panel app, the readers'):
    past max_waiting, a new API request is refused rather than queued behind them."""
    from types import SimpleNamespace

    from engine.serve import APIError, ApiState
    state = ApiState(lambda: None, limits=ServerLimits(max_waiting=2, retry_after_s=3))
    with pytest.raises(APIError) as refused:
        state.admit(SimpleNamespace(stats=SimpleNamespace(num_waiting=2)))
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "3"}
    assert "queue is full" in refused.value.message and state.counts.refused_busy == 1
    state.admit(SimpleNamespace(stats=SimpleNamespace(num_waiting=1)))
    assert state.counts.in_flight == 1


# -- python -m engine serve ---------------------------------------------------------------------------------
def test_python_m_engine_serve_starts_alone(tiny_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(tiny_path), "--device", "cpu",
                             "--port", "0", "--api-key", "k"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()                      # "serving NAME at http://127.0.0.1:PORT/v1 (...)"
        assert " at http://" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" at ", 1)[1].split()[0]
        c = openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=60)
        assert c.models.list().data[0].id == "tiny-model"
        assert c.completions.create(model="tiny-model", prompt="Hi", max_tokens=3,
                                    extra_body=NO_EOS).usage.completion_tokens == 3
    finally:
        proc.terminate()                                   # SIGTERM: a clean stop
        code = proc.wait(timeout=30)
    assert code == 0 and "Traceback" not in proc.stderr.read()


def test_serve_refuses_bad_limits_before_loading():
    r = subprocess.run([sys.executable, "-m", "engine", "serve", "--max-concurrent", "0"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "max_concurrent" in r.stderr and "Traceback" not in r.stderr


# -- the real model ------------------------------------------------------------------------------------------
def test_the_real_model_answers_through_the_api(llm):
    server = ApiServer(llm, port=0).start()
    try:
        c = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=300)
        name = c.models.list().data[0].id                    # the model's own name (its file's)
        assert name.startswith("SmolLM2-135M-Instruct")
        r = c.chat.completions.create(model=name, max_tokens=24, temperature=0,
                                      messages=[{"role": "user", "content": "What is the capital of France?"}])
        assert "Paris" in r.choices[0].message.content
    finally:
        server.stop()


def test_the_default_model_answers_to_its_hugging_face_id_too():
    from types import SimpleNamespace

    from engine.serve import ApiState
    fake = SimpleNamespace(tokenizer=None, config=SimpleNamespace(name="SmolLM2-135M-Instruct.Q4_1", vocab_size=8),
                           engine=SimpleNamespace(max_model_len=64))
    names = ApiState(lambda: fake).model_limits(fake).model_names
    assert names[0] == "SmolLM2-135M-Instruct.Q4_1" and "HuggingFaceTB/SmolLM2-135M-Instruct" in names
    other = SimpleNamespace(tokenizer=None, config=SimpleNamespace(name="tiny", vocab_size=8),
                            engine=SimpleNamespace(max_model_len=64))
    assert ApiState(lambda: other, served_model_name="mine").model_limits(other).model_names == ("mine", "tiny")
