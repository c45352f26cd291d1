"""The engine side of the tokenizer playground (chapter 2): text -> token ids and the spans they cover
(no Panel, no HTML here; view.py draws them).

Both tokenizers are the engine's own (``llm.tokenizers``): the model's, rebuilt from its file, and
GPT-2's 50,257-token vocabulary. The engine's tokenizer gives each token a character span, widened to
whole visible characters (grapheme clusters), so a span never splits what the reader sees. When
several tokens share one visible character (an emoji is 4 UTF-8 bytes, often 2–4 byte-level tokens),
their spans overlap; we merge them into one segment that carries all their ids:

    text      W h a t ␣ i s ␣ 👋🏽
    tokens    [What][␣is][␣][👋🏽 byte tokens 1..4 ]
    segments  [What][␣is][␣][        👋🏽        ]   <- one segment, ids [.., .., .., ..]

So the segments' texts, in order, are exactly the input text.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import regex

TOKENIZERS = ("model", "gpt2")          # keys of llm.tokenizers: the model's own, then GPT-2

# The samples are the chapter's own examples: its prose sentence and its Python function, plus a
# technical sentence with units, identifiers and digits.
SAMPLES = {
    "English prose": "The train left the station ten minutes late, so we bought coffee and watched the "
                     "fields roll past until the city came into view.",
    "Technical text": "Set max_num_batched_tokens=2048 and block_size=16: in bf16, each token's KV cache "
                      "takes 2 × 30 × 3 × 64 × 2 = 23,040 bytes, so a 4,096-token prompt needs about 94 MB.",
    "Python code": "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
                   "    return total / len(values)\n",
}


@dataclass(slots=True)
class Segment:
    start: int                     # [start, end) character offsets into the text
    end: int
    ids: list[int] = field(default_factory=list)    # tokens drawn as this one span (empty: untokenized gap)
    first: int = 0                 # index of its first token


@dataclass(slots=True)
class Tokenized:
    name: str                      # the tokenizer's name, as the engine reports it
    vocab_size: int
    text: str
    ids: list[int]
    segments: list[Segment]
    took_s: float = 0.0            # server time to tokenize and place the spans

    @property
    def num_chars(self) -> int:
        """Visible characters (grapheme clusters): what a reader would count."""
        return count_chars(self.text)

    @property
    def chars_per_token(self) -> float | None:
        return self.num_chars / len(self.ids) if self.ids else None


def count_chars(text: str) -> int:
    return len(regex.findall(r"\X", text))


def segments_from_spans(text: str, spans: list[tuple[int, int]]) -> list[Segment]:
    """Merge overlapping token spans into segments that tile the text exactly."""
    segs: list[Segment] = []
    cursor = 0
    for i, (s, e) in enumerate(spans):
        if segs and segs[-1].ids and (s < segs[-1].end or e <= s):   # shares a visible character (or is empty)
            segs[-1].end = max(segs[-1].end, e)
            segs[-1].ids.append(i)
            cursor = segs[-1].end
            continue
        if s > cursor:                                          # text no token covers (never in byte BPE)
            segs.append(Segment(cursor, s))
        segs.append(Segment(max(s, cursor), max(e, s, cursor), [i], i))
        cursor = max(cursor, e)
    if cursor < len(text):
        segs.append(Segment(cursor, len(text)))
    return segs


def tokenize(tokenizer, text: str) -> Tokenized:
    """One tokenizer's view of ``text``: ids, and segments whose ids are token positions."""
    t0 = time.perf_counter()
    enc = tokenizer.encode(text)
    segs = segments_from_spans(text, enc.spans)
    for seg in segs:                                           # positions -> token ids
        seg.ids = [enc.ids[i] for i in seg.ids]
    return Tokenized(tokenizer.name, tokenizer.vocab_size, text, enc.ids, segs, time.perf_counter() - t0)


def tokenize_all(llm, text: str) -> list[Tokenized]:
    return [tokenize(llm.tokenizers.get(key), text) for key in TOKENIZERS]


def sample_stats(llm) -> dict[str, dict[str, list]]:
    """{sample: {tokenizer name: [tokens, characters]}} for the three samples."""
    out = {}
    for kind, text in SAMPLES.items():
        out[kind] = {tk.name: [len(tk.ids), tk.num_chars] for tk in tokenize_all(llm, text)}
    return out


def saved_tokenized(d: dict, text: str) -> Tokenized:
    """One tokenizer's entry of the saved example, as the Tokenized it was made from."""
    return Tokenized(d["name"], d["vocab_size"], text, d["ids"], [Segment(*s) for s in d["segments"]])


def text_of(length: int) -> str:
    """Prose, technical text and code in turn, cut to ``length`` characters (what the benchmarks type)."""
    mixed = "\n".join(SAMPLES.values())
    return (mixed * (length // len(mixed) + 1))[:length]
