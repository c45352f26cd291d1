"""Incremental detokenization: the streamed text is exactly the full decode, stop strings are never
half-streamed, and the work per token stays constant (counted, not timed)."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.llm_engine import LLMEngine
from engine.loader.tokenizer import TextTokenizer, byte_tokenizer, gpt2_tokenizer
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from tests.helpers.tiny import TINY

TEXT = ("Paged attention keeps K/V in blocks — naïve caches don't. 東京 is 🗼-tall; "
        "emoji such as 👩‍💻 take several tokens, and so do accents: café, Ångström.\n") * 4
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class CountingTokenizer(TextTokenizer):
    """A tokenizer that counts the token ids every decode() call is given."""

    def __init__(self, base: TextTokenizer):
        super().__init__(base.tok, base.name)
        self.ids_decoded = self.calls = 0

    def decode(self, ids, skip_special_tokens=False):
        self.calls += 1
        self.ids_decoded += len(ids)
        return super().decode(ids, skip_special_tokens=skip_special_tokens)


def test_deltas_add_up_to_the_full_decode_of_multibyte_text():
    tok = gpt2_tokenizer()
    ids = tok.encode(TEXT).ids
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.add(i) for i in ids]
    assert "".join(deltas) == detok.text == tok.decode(ids) == TEXT
    assert any(d == "" for d in deltas)            # some tokens only carry part of a character


@pytest.mark.parametrize("stop", ["Ångström", "🗼", "naïve caches"])
def test_a_stop_string_is_never_streamed_even_in_part(stop):
    tok = gpt2_tokenizer()
    detok = IncrementalDetokenizer(tok, stop=[stop, "never appears"])
    streamed = ""
    for i in tok.encode(TEXT).ids:
        streamed += detok.add(i)
        assert stop[:2] not in streamed[len(TEXT.split(stop)[0]):]     # nothing of it went out early
        if detok.stopped:
            break
    assert detok.stopped and streamed == detok.text == TEXT.split(stop)[0]


def test_held_back_text_is_flushed_when_the_request_ends_otherwise():
    tok = gpt2_tokenizer()
    detok = IncrementalDetokenizer(tok, stop=["a long stop string"])
    streamed = "".join(detok.add(i) for i in tok.encode("Hello world").ids)
    assert len(streamed) < len("Hello world")      # up to len(stop) - 1 characters held back
    assert streamed + detok.flush() == "Hello world"


def test_streaming_2000_tokens_decodes_linear_work():
    tok = CountingTokenizer(byte_tokenizer())
    model = Llama.random(TINY, seed=9).eval()
    engine = LLMEngine(model, EngineConfig(block_size=16), tokenizer=tok)
    engine.add_request("long", "once upon a time", SamplingParams(temperature=1.0, seed=0, max_tokens=2000,
                                                                   ignore_eos=True))
    events = []
    while engine.has_unfinished():
        events += engine.step()
    out = engine.take_output("long").outputs[0]
    assert len(out.token_ids) == 2000
    assert "".join(e.text_delta for e in events) == out.text == tok.tok.decode(out.token_ids, skip_special_tokens=True)
    # two short decodes per token (random bytes often leave a character open, so windows are a few
    # ids long); decoding everything so far on every token would be 2000 * 2001 / 2 = 2,001,000 ids
    assert tok.calls <= 2 * 2000 + 2 and tok.ids_decoded <= 8 * 2000
