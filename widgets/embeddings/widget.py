"""`embeddings` (chapter 3): explore SmolLM2's real embedding table.

    compare   [king] [queen]   -> cosine 0.62, and which rows were compared (one token, or an average)
    nearest   [king]           -> the ten most similar rows of all 49,152, with their cosines
    map       royalty · animals · numbers · your words  -> a 2-D PCA picture of those words (Bokeh, hover)
    table     49,152 × 576, its bytes here (measured) and in bf16 / the shipped Q8_0 file (modelled)

Every figure is computed from ``llm.embedding_table()`` (widgets/embedding_space.py) in one debounced
background job; the saved example paints first. "Your words" start as the words of the reader's
sentence from chapter 2, when the URL carries one.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import panel as pn
import regex

from widgets.common import (EngineGate, JobRunner, clip, esc, example, html_pane, label_html, load_example, measured,
                            modelled, reader_sentence, register, show_token)
from widgets.embedding_space import cosine, nearest, pca_2d, table_facts, word_vector
from widgets.embedding_view import EmbeddingMap, compare_html, facts_html, legend_html, neighbours_html

WORD_LIMIT = 40               # characters in one word box
MAX_OWN_WORDS = 12
WORD_SETS = {
    "royalty": ["king", "queen", "prince", "princess", "throne", "crown", "emperor", "royal"],
    "animals": ["dog", "cat", "horse", "cow", "lion", "tiger", "bird", "fish"],
    "numbers": ["one", "two", "three", "four", "five", "six", "seven", "eight"],
}
OWN = "your words"
DEFAULT_OWN = "red, green, blue, yellow, coffee, tea"


@dataclass(slots=True)
class Inputs:
    word_a: str = "king"
    word_b: str = "queen"
    near: str = "king"
    sets: tuple = ("royalty", "animals", "numbers", OWN)
    own: str = DEFAULT_OWN
    leading_space: bool = True


def own_words(text: str) -> list[str]:
    """The reader's words: comma-separated, or the distinct words of a sentence; at most 12."""
    parts = [p.strip() for p in text.split(",")] if "," in text else regex.findall(r"[\p{L}\p{N}'’-]+", text)
    seen, out = set(), []
    for p in parts:
        p = p[:WORD_LIMIT]
        if p and p.lower() not in seen:
            seen.add(p.lower())
            out.append(p)
    return out[:MAX_OWN_WORDS]


def compute(llm, inp: Inputs) -> dict:
    """Everything the widget shows, as plain data (also what the saved example stores)."""
    out: dict = {"inputs": [inp.word_a, inp.word_b, inp.near]}
    try:
        a, b = word_vector(llm, inp.word_a, inp.leading_space), word_vector(llm, inp.word_b, inp.leading_space)
        out["compare"] = {"a": a.text, "b": b.text, "cos": cosine(a.vector, b.vector), "how": [a.how, b.how]}
    except ValueError:
        out["compare"] = None
    try:
        q = word_vector(llm, inp.near, inp.leading_space)
        out["nearest"] = {"word": q.text, "how": q.how, "rows": nearest(llm, q)}
    except ValueError:
        out["nearest"] = None
    groups = {name: WORD_SETS.get(name) or own_words(inp.own) for name in inp.sets}
    points = [(name, word_vector(llm, w, inp.leading_space)) for name, words in groups.items() for w in words]
    if points:
        import torch
        coords, share = pca_2d(torch.stack([v.vector for _, v in points]))
        out["map"] = {"share": share, "points": [[name, v.word, " · ".join(show_token(p) for p in v.pieces), len(v.ids), *xy]
                                                 for (name, v), xy in zip(points, coords.tolist())]}
    else:
        out["map"] = {"share": [0.0, 0.0], "points": []}
    f = table_facts(llm)
    out["facts"] = [f.vocab, f.hidden, f.dtype, f.bytes_here, f.bytes_bf16, f.bytes_q8_0]
    return out


@example("embeddings")
def embeddings_example(llm) -> dict:
    return compute(llm, Inputs())


class EmbeddingsWidget(pn.viewable.Viewer):
    def __init__(self, engine, word_a: str = "king", word_b: str = "queen", near: str = "king", **params):
        super().__init__(**params)
        self._saved = load_example("embeddings")
        sentence = reader_sentence("")
        own = ", ".join(own_words(sentence)) if sentence else DEFAULT_OWN
        self._inp = Inputs(word_a[:WORD_LIMIT], word_b[:WORD_LIMIT], near[:WORD_LIMIT], own=own)
        box = dict(max_length=WORD_LIMIT, width=150, margin=(4, 8, 4, 0))
        self._a = pn.widgets.TextInput(label="First word", value=self._inp.word_a, css_classes=["emb-a"], **box)
        self._b = pn.widgets.TextInput(label="Second word", value=self._inp.word_b, css_classes=["emb-b"], **box)
        self._near = pn.widgets.TextInput(label="Neighbours of", value=self._inp.near, css_classes=["emb-near-word"], **box)
        self._space = pn.widgets.Checkbox(label="as a word inside a sentence (with its leading space ␣)",
                                          value=True, css_classes=["emb-space"])
        self._sets = pn.widgets.CheckButtonGroup(options=[*WORD_SETS, OWN], value=list(self._inp.sets),
                                                 css_classes=["emb-sets"], variant="outline", margin=(4, 0))
        self._own = pn.widgets.TextInput(label="Your words (separated by commas, up to 12)", value=own,
                                         max_length=400, sizing_mode="stretch_width", css_classes=["emb-own"])
        self._compare = html_pane("", ["emb-compare-pane"])
        self._neighbours = html_pane("", ["emb-neighbours-pane"])
        self._notes = html_pane("", ["emb-notes-pane"])
        self._map = EmbeddingMap(list(WORD_SETS) + [OWN])
        self._map_note = html_pane("", ["emb-map-pane"])
        self._facts = html_pane("", ["emb-facts-pane"])
        self.gate = EngineGate(engine, lambda llm: self._update(), example=self._saved,
                               live_text="{model}'s embedding table on {device}, recomputed as you type")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="embeddings")
        for w in (self._a, self._b, self._near, self._own):
            w.param.watch(self._on_input, ["value", "value_input"])
        self._space.param.watch(self._on_input, "value")
        self._sets.param.watch(self._on_input, "value")
        title = html_pane('<p class="w-title"><b>Embedding explorer</b> — every token is a row of 576 numbers in '
                          "SmolLM2's embedding table. Compare two words, list a word's nearest rows, and map "
                          "sets of words onto a flat picture.</p>")
        row = pn.FlexBox(self._a, self._b, self._near, flex_wrap="wrap", sizing_mode="stretch_width")
        self._layout = pn.Column(
            title, self.gate.pane, row, self._space, self._notes, self._compare, self._neighbours,
            html_pane(legend_html([*WORD_SETS, OWN])),
            self._sets, self._own, self._map.pane, self._map_note, self._facts,
            sizing_mode="stretch_width", css_classes=["emb-widget"])
        if self._saved is not None:
            self._paint(self._saved.data, self._saved.label)
        self.gate.start()

    def __panel__(self):
        return self._layout

    def _on_input(self, *events) -> None:
        event = events[-1]             # "value" and "value_input" may change together: one update
        value = event.new
        if event.obj is self._space:
            self._inp.leading_space = bool(value)
        elif event.obj is self._sets:
            self._inp.sets = tuple(v for v in self._sets.options if v in value)
        else:
            limit = 400 if event.obj is self._own else WORD_LIMIT
            text, _ = clip(value or "", limit)
            field = {id(self._a): "word_a", id(self._b): "word_b", id(self._near): "near", id(self._own): "own"}[id(event.obj)]
            if getattr(self._inp, field) == text:
                return                 # value catching up with value_input on blur: nothing new
            setattr(self._inp, field, text)
        self._update(debounce_ms=150)

    def _update(self, debounce_ms: int = 0) -> None:
        if not self.gate.live:
            return
        llm = self.gate.llm
        inp = dataclasses.replace(self._inp)          # a snapshot: the reader may type on meanwhile

        def work(job):
            t0 = time.perf_counter()
            data = compute(llm, inp)
            return data, measured(llm.device_name, time.perf_counter() - t0)
        self._runner.submit(work, lambda out: self._paint(*out), on_error=self.gate.error, debounce_ms=debounce_ms)

    def _paint(self, data: dict, label: str) -> None:
        notes = []
        if data["compare"] is None:
            notes.append("Type a word in both boxes to compare them.")
        if data["nearest"] is None:
            notes.append("Type a word to list its neighbours.")
        if OWN in self._inp.sets and not own_words(self._inp.own):
            notes.append("Your words are empty: type a few, separated by commas.")
        self._notes.object = "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes)
        self._compare.object = compare_html(data["compare"], label)
        self._neighbours.object = neighbours_html(data["nearest"], label)
        self._map.show(data["map"])
        share = data["map"]["share"]
        self._map_note.object = (
            f'<p class="w-small">PCA keeps the two directions along which these words differ most: they carry '
            f"{100 * share[0]:.0f}% and {100 * share[1]:.0f}% of the spread among them; the other 574 "
            f"dimensions are flattened away. Hover a point for its tokens. {label_html(label)}</p>")
        self._facts.object = facts_html(data["facts"], label, modelled("from the table's shape"))


@register("embeddings")
def make_embeddings(engine, **args) -> EmbeddingsWidget:
    """Factory for ``::: widget embeddings {"word_a": "king", "word_b": "queen", "near": "king"}``."""
    return EmbeddingsWidget(engine, **args)
