"""`tokenizer` (chapter 2): type text and see how SmolLM2's and GPT-2's tokenizers cut it, side by side.

    [English prose] [Technical text] [Python code]        samples: chars/token differs by kind of text
    ┌ your text (≤ 20,000 characters) ───────────────┐    carried to later chapters in the URL
    └────────────────────────────────────────────────┘
    ☐ token ids   ☐ whitespace
    ┌ SmolLM2-135M-Instruct ─────┐ ┌ GPT-2 ────────────────────┐
    │ 7 tokens · 30 characters   │ │ 7 tokens · 30 characters  │   recomputed as you type (debounced)
    │ [What][␣is][␣the]…         │ │ [What][␣is][␣the]…        │   hover a piece: its id lights up
    │ 1780 314 260 …             │ │ 2061 318 262 …            │   (the id row, when shown)
    └────────────────────────────┘ └───────────────────────────┘

Both tokenizers are the engine's own (``llm.tokenizers``): the model's, rebuilt from its file, and
GPT-2's 50,257-token vocabulary. The page shows the saved example until the model is loaded.
"""
from __future__ import annotations

import time

import panel as pn

from widgets.common import (SENTENCE_SOURCE, EngineGate, JobRunner, clip, esc, example, html_pane, label_html,
                            load_example, measured, reader_sentence, register)
from widgets.common.sentence import SENTENCE_LIMIT
from widgets.token_spans import Tokenized, render, tokenize

LIMIT = 20_000
DEFAULT_TEXT = "What is the capital of France?"
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


def tokenize_all(llm, text: str) -> list[Tokenized]:
    return [tokenize(llm.tokenizers.get(key), text) for key in TOKENIZERS]


def sample_stats(llm) -> dict[str, dict[str, list]]:
    """{sample: {tokenizer name: [tokens, characters]}} for the three samples."""
    out = {}
    for kind, text in SAMPLES.items():
        out[kind] = {tk.name: [len(tk.ids), tk.num_chars] for tk in tokenize_all(llm, text)}
    return out


@example("tokenizer")
def tokenizer_example(llm) -> dict:
    return {"text": DEFAULT_TEXT,
            "tokenizers": [{"name": tk.name, "vocab_size": tk.vocab_size, "ids": tk.ids,
                            "segments": [[s.start, s.end, s.ids, s.first] for s in tk.segments]}
                           for tk in tokenize_all(llm, DEFAULT_TEXT)],
            "samples": sample_stats(llm)}


def _from_saved(d: dict, text: str) -> Tokenized:
    from widgets.token_spans import Segment
    return Tokenized(d["name"], d["vocab_size"], text, d["ids"], [Segment(*s) for s in d["segments"]])


def samples_html(stats: dict, label: str) -> str:
    names = list(next(iter(stats.values()))) if stats else []
    # Long names may break after a hyphen; "GPT-2" must not.
    head = "".join(f"<th>{esc(n).replace('-', '-<wbr>') if len(n) > 12 else esc(n)}</th>" for n in names)
    rows = []
    for kind, by_tok in stats.items():
        cells = "".join(f"<td><b>{chars / tokens:.1f}</b> <span class=\"w-small\">({tokens:,})</span></td>"
                        if tokens else "<td>–</td>" for tokens, chars in by_tok.values())
        chars = next(iter(by_tok.values()))[1]
        rows.append(f"<tr><th scope=\"row\">{esc(kind)} <span class=\"w-small\">({chars} characters)</span></th>{cells}</tr>")
    return (f'<table class="tk-samples"><caption>Characters per token (and tokens) for the three samples '
            f"{label_html(label)}</caption><thead><tr><th>sample</th>{head}</tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table>')


class TokenizerWidget(pn.viewable.Viewer):
    def __init__(self, engine, text: str = DEFAULT_TEXT, **params):
        super().__init__(**params)
        self._saved = load_example("tokenizer")
        self._text, note = clip(reader_sentence(text), LIMIT)
        self._results: list[Tokenized] = []
        self._label = ""
        self._box = pn.widgets.TextAreaInput(
            label="Your text", value=self._text, max_length=LIMIT, rows=3, auto_grow=True, max_rows=12,
            sizing_mode="stretch_width", css_classes=["tk-input", SENTENCE_SOURCE])
        self._buttons = [pn.widgets.Button(label=kind, css_classes=["tk-sample"], variant="outline",
                                           margin=(4, 6, 4, 0)) for kind in SAMPLES]
        for button in self._buttons:
            button.on_click(lambda e, kind=button.label: self._use_sample(kind))
        self._show_ids = pn.widgets.Checkbox(label="Show token ids", value=False, css_classes=["tk-show-ids"])
        self._show_ws = pn.widgets.Checkbox(label="Show whitespace", value=False, css_classes=["tk-show-ws"])
        self._show_ids.param.watch(self._toggle_ids, "value")
        self._show_ws.param.watch(lambda e: self._paint(), "value")
        self._count = html_pane(self._count_html(note), ["tk-count-pane"])
        self._cols = html_pane("", ["tk-cols-pane"])
        self._samples = html_pane("", ["tk-samples-pane"])
        self.gate = EngineGate(engine, self._live, example=self._saved,
                               live_text="tokenized by the engine on {device} as you type")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="tokenizer")
        self._box.param.watch(self._on_text, ["value", "value_input"])
        title = html_pane('<p class="w-title"><b>Tokenizer playground</b> — type or paste any text and see '
                          "how two real tokenizers cut it. Try a sample: the characters per token change with "
                          "the kind of text.</p>")
        toggles = pn.FlexBox(self._show_ids, self._show_ws, flex_wrap="wrap", sizing_mode="stretch_width")
        self._layout = pn.Column(title, self.gate.pane, pn.FlexBox(*self._buttons, flex_wrap="wrap"), self._box,
                                 self._count, toggles, self._cols, self._samples,
                                 sizing_mode="stretch_width", css_classes=["tk-widget"])
        self._paint_saved()
        self.gate.start()

    def __panel__(self):
        return self._layout

    # -- events -----------------------------------------------------------------------------------
    def _on_text(self, *events) -> None:
        # "value" and "value_input" may change in one message: one update, from the newest value
        text, note = clip(events[-1].new or "", LIMIT)
        if text == self._text and self._results:
            return                     # value catching up with value_input on blur: nothing new
        self._text = text
        self._count.object = self._count_html(note)
        self._update(debounce_ms=15)      # tokenizing 2,000 characters takes ~11 ms: a longer wait only adds lag

    def _use_sample(self, kind: str) -> None:
        self._box.value = SAMPLES[kind]                  # fires _on_text

    def _toggle_ids(self, event) -> None:
        classes = [c for c in self._cols.css_classes if c != "show-ids"]
        self._cols.css_classes = classes + ["show-ids"] if event.new else classes

    def _live(self, llm) -> None:
        self._update(samples=True)

    def _update(self, debounce_ms: int = 0, samples: bool = False) -> None:
        if not self.gate.live:
            return
        llm, text = self.gate.llm, self._text

        def work(job):
            t0 = time.perf_counter()
            results = tokenize_all(llm, text)
            label = measured(llm.device_name, time.perf_counter() - t0)
            # The sample table is the same for every reader: computed once per engine.
            stats = (_SAMPLE_CACHE.get(id(llm)) or _SAMPLE_CACHE.setdefault(id(llm), sample_stats(llm))) if samples else None
            return results, label, stats
        self._runner.submit(work, self._show, on_error=self.gate.error, debounce_ms=debounce_ms)

    def _show(self, out) -> None:
        self._results, self._label, stats = out
        self._paint()
        if stats is not None:
            self._samples.object = samples_html(stats, measured(self.gate.llm.device_name))

    # -- painting ---------------------------------------------------------------------------------
    def _paint_saved(self) -> None:
        if self._saved is None:
            self._cols.object = '<p class="placeholder">Tokens appear here once the model is loaded.</p>'
            return
        d = self._saved.data
        self._results = [_from_saved(t, d["text"]) for t in d["tokenizers"]]
        self._label = self._saved.label
        yours = ""
        if self._text != d["text"]:
            yours = (f'<p class="w-small">Showing the saved example “{esc(d["text"])}”; your text follows '
                     "once the model is loaded.</p>")
        self._paint(prefix=yours)
        self._samples.object = samples_html(d["samples"], self._saved.label)

    def _paint(self, prefix: str = "") -> None:
        if not self._results:
            return
        label = f'<p class="tk-label">{label_html(self._label)}</p>'
        cols = "".join(render(tk, key, self._show_ws.value, label) for tk, key in zip(self._results, "sg"))
        self._cols.object = f'{prefix}<div class="tk-cols">{cols}</div>'

    def _count_html(self, note: str | None) -> str:
        shared = "" if len(self._text) <= SENTENCE_LIMIT else " · too long to carry in the page's link"
        msg = f'<p class="w-note">{esc(note)}</p>' if note else ""
        if len(self._text) >= LIMIT and not note:
            msg = f'<p class="w-note">You have reached the limit of {LIMIT:,} characters.</p>'
        return (f'<p class="w-small tk-length">{len(self._text):,} characters · limit {LIMIT:,}'
                f"{shared}</p>{msg}")


_SAMPLE_CACHE: dict[int, dict] = {}


@register("tokenizer")
def make_tokenizer(engine, **args) -> TokenizerWidget:
    """Factory for ``::: widget tokenizer {"text": ...}``."""
    return TokenizerWidget(engine, **args)
