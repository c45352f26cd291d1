"""Tokenizers: pinned ids, agreement with transformers, and spans that never split a visible character."""
from __future__ import annotations

import pytest
import regex

from engine.loader.tokenizer import TokenizerRegistry, byte_tokenizer, gpt2_tokenizer

SAMPLES = [
    "Hello world",
    "The capital of France is Paris.",
    "def add(a, b):\n    return a + b  # sum\n",
    "日本語のテキストを分割する",
    "emoji: 🙂👍🏽 and a family 👩‍👩‍👧 — café naïve",
    "numbers 12345 and 3.14159",
    "<|im_start|>user\nhi<|im_end|>\n",
    "   spaces\t\ttabs\n\nnewlines",
]


def test_gpt2_ids_are_pinned():
    gpt2 = gpt2_tokenizer()
    assert gpt2.vocab_size == 50257
    assert gpt2.encode("Hello").ids == [15496]
    assert gpt2.encode("Hello world").ids == [15496, 995]
    assert gpt2.decode([15496, 995]) == "Hello world"


def test_smollm2_ids_are_pinned(llm):
    tok = llm.tokenizer
    assert tok.vocab_size == 49152
    assert tok.encode("Hello world").ids == [19556, 905]
    assert tok.encode("What is the capital of France?").ids == [1780, 314, 260, 3575, 282, 4649, 47]
    # SmolLM2 splits numbers digit by digit; control tokens stay whole
    assert tok.encode("2024").ids == [34, 32, 34, 36]
    assert tok.encode("<|im_start|>").ids == [1]


def test_smollm2_matches_transformers_tokenizer(llm):
    from transformers import AutoTokenizer
    from engine.loader.weights import default_gguf_path
    path = default_gguf_path()
    hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in SAMPLES:
        assert llm.tokenizer.encode(text).ids == hf.encode(text, add_special_tokens=False), text


def _tokenizers(llm):
    return [llm.tokenizer, gpt2_tokenizer(), byte_tokenizer()]


@pytest.mark.parametrize("text", SAMPLES)
def test_spans_cover_text_in_order_and_respect_graphemes(llm, text):
    boundaries = {0, len(text)} | {m.end() for m in regex.finditer(r"\X", text)}
    for tok in _tokenizers(llm):
        enc = tok.encode(text)
        assert len(enc.spans) == len(enc.ids)
        assert tok.decode(enc.ids) == text                       # byte-level BPE is lossless
        for start, end in enc.spans:
            assert start in boundaries and end in boundaries, (tok.name, text, start, end)
        # spans never go backwards, and together they cover every character
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(enc.spans, enc.spans[1:]))
        covered = set()
        for start, end in enc.spans:
            covered.update(range(start, end))
        assert covered == set(range(len(text)))


def test_a_token_span_is_the_token_text_when_it_owns_whole_characters(llm):
    text = "tokens are not words: unbelievable"
    enc = llm.tokenizer.encode(text)
    for tid, (start, end) in zip(enc.ids, enc.spans):
        assert text[start:end] == llm.tokenizer.decode([tid])


def test_emoji_pieces_share_the_emoji_span(llm):
    text = "a👍🏽b"
    enc = gpt2_tokenizer().encode(text)
    emoji_spans = {s for s in enc.spans if s != (0, 1) and s != (len(text) - 1, len(text))}
    assert emoji_spans == {(1, 3)}          # thumbs up + skin tone: one visible character, two code points
    assert len(enc.ids) > 3                 # ... cut into several byte-level tokens


def test_registry_lists_tokenizers_with_vocab_sizes(llm):
    reg = TokenizerRegistry(llm.tokenizer)
    listed = {info.key: info.vocab_size for info in reg.list()}
    assert listed == {"model": 49152, "gpt2": 50257}
    with pytest.raises(KeyError):
        reg.get("nope")


def test_chat_template_wraps_the_prompt(llm):
    text = llm.format_prompt("Hi there", chat=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    assert llm.format_prompt("Hi there", chat=False) == "Hi there"
