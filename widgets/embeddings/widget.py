"""`embeddings` (chapter 3): explore SmolLM2's real embedding table.

    compare   [king] [queen]   -> cosine 0.62, and which rows were compared (one token, or an average)
    nearest   [king]           -> the ten most similar rows of all 49,152, with their cosines
    map       royalty · animals · numbers · your words  -> a 2-D PCA picture of those words (Bokeh, hover)
    table     49,152 × 576, its bytes here (measured) and in bf16 / the shipped Q8_0 file (modelled)

Every figure is computed from ``llm.embedding_table()`` (compute.py) in one debounced background job
and drawn by view.py; the saved example paints first. "Your words" start as the words of the reader's
sentence from chapter 2, when the URL carries one.
"""
from __future__ import annotations

import dataclasses
import time

import panel as pn
import param

from widgets.common import Widget, clip, example, html_pane, measured, modelled, register
from widgets.common.timing import timed
from widgets.embeddings.compute import (DEFAULT_OWN, OWN, WORD_LIMIT, WORD_SETS, Inputs, compute, nearest,
                                        own_words, word_vector)
from widgets.embeddings.view import (EmbeddingMap, compare_html, facts_html, legend_html, map_note_html,
                                     neighbours_html)

OWN_LIMIT = 400               # characters in the "your words" box


@example
def embeddings_example(llm) -> dict:
    return compute(llm, Inputs())


@register
class EmbeddingsWidget(Widget):
    css = "emb"
    live_text = "{model}'s embedding table on {device}, recomputed as you type"
    word_a = param.String(default="king", doc="the first word compared")
    word_b = param.String(default="queen", doc="the second word compared")
    near = param.String(default="king", doc="the word whose nearest rows are listed")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        sentence = self.reader_sentence("")
        own = ", ".join(own_words(sentence)) if sentence else DEFAULT_OWN
        self._inp = Inputs(self.word_a[:WORD_LIMIT], self.word_b[:WORD_LIMIT], self.near[:WORD_LIMIT], own=own)
        box = dict(max_length=WORD_LIMIT, width=150, margin=(4, 8, 4, 0))
        self._a = pn.widgets.TextInput(label="First word", value=self._inp.word_a, css_classes=["emb-a"], **box)
        self._b = pn.widgets.TextInput(label="Second word", value=self._inp.word_b, css_classes=["emb-b"], **box)
        self._near = pn.widgets.TextInput(label="Neighbours of", value=self._inp.near, css_classes=["emb-near-word"], **box)
        self._space = pn.widgets.Checkbox(label="as a word inside a sentence (with its leading space ␣)",
                                          value=True, css_classes=["emb-space"])
        self._sets = pn.widgets.CheckButtonGroup(options=[*WORD_SETS, OWN], value=list(self._inp.sets),
                                                 css_classes=["emb-sets"], variant="outline", margin=(4, 0))
        self._own = pn.widgets.TextInput(label="Your words (separated by commas, up to 12)", value=own,
                                         max_length=OWN_LIMIT, sizing_mode="stretch_width", css_classes=["emb-own"])
        self._compare = html_pane("", ["emb-compare-pane"])
        self._neighbours = html_pane("", ["emb-neighbours-pane"])
        self._map = EmbeddingMap(list(WORD_SETS) + [OWN])
        self._map_note = html_pane("", ["emb-map-pane"])
        self._facts = html_pane("", ["emb-facts-pane"])
        for w in (self._a, self._b, self._near, self._own):
            w.param.watch(self._on_input, ["value", "value_input"])
        self._space.param.watch(self._on_input, "value")
        self._sets.param.watch(self._on_input, "value")
        row = pn.FlexBox(self._a, self._b, self._near, flex_wrap="wrap", sizing_mode="stretch_width")
        self.layout = pn.Column(
            self.title("<b>Embedding explorer</b> — every token is a row of 576 numbers in SmolLM2's embedding "
                       "table. Compare two words, list a word's nearest rows, and map sets of words onto a flat "
                       "picture."),
            self.gate.pane, row, self._space, self.notes, self._compare, self._neighbours,
            html_pane(legend_html([*WORD_SETS, OWN])),
            self._sets, self._own, self._map.pane, self._map_note, self._facts,
            sizing_mode="stretch_width", css_classes=["emb-widget"])
        if self.example is not None:
            self._paint(self.example.data, self.example.label)
        self.gate.start()

    def on_live(self, llm) -> None:
        self._update()

    def _on_input(self, *events) -> None:
        event = events[-1]             # "value" and "value_input" may change together: one update
        value = event.new
        if event.obj is self._space:
            self._inp.leading_space = bool(value)
        elif event.obj is self._sets:
            self._inp.sets = tuple(v for v in self._sets.options if v in value)
        else:
            limit = OWN_LIMIT if event.obj is self._own else WORD_LIMIT
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
        self.jobs.submit(work, lambda out: self._paint(*out), on_error=self.gate.error, debounce_ms=debounce_ms)

    def _paint(self, data: dict, label: str) -> None:
        self.say("Type a word in both boxes to compare them." if data["compare"] is None else None,
                 "Type a word to list its neighbours." if data["nearest"] is None else None,
                 "Your words are empty: type a few, separated by commas."
                 if OWN in self._inp.sets and not own_words(self._inp.own) else None)
        self._compare.object = compare_html(data["compare"], label)
        self._neighbours.object = neighbours_html(data["nearest"], label)
        self._map.show(data["map"])
        self._map_note.object = map_note_html(data["map"]["share"], label)
        self._facts.object = facts_html(data["facts"], label, modelled("from the table's shape"))


def bench(llm, repeat: int = 30) -> dict:
    """Server milliseconds (median, p90 of ``repeat`` after two warm-up runs):

    neighbours    one word's ten nearest rows among all 49,152 (the rows' lengths kept, as in the widget
                  after its first query)
    pca_map       the word vectors of the four sets, PCA, and the points handed to the Bokeh sources
    embeddings    everything the explorer recomputes on one change (cosine, neighbours, map, facts): the
                  widget runs all of it as one job
    """
    def time_it(fn) -> dict:
        return {**timed(fn, repeat, warmup=2), "runs": repeat}
    query = word_vector(llm, "king")
    fig = EmbeddingMap([*WORD_SETS, OWN])
    only_map = Inputs(word_a="", word_b="", near="")          # empty words: compute() skips those parts
    return {"neighbours": time_it(lambda: nearest(llm, query)),
            "pca_map": {**time_it(lambda: fig.show(compute(llm, only_map)["map"])),
                        "words": len(compute(llm, only_map)["map"]["points"])},
            "embeddings": time_it(lambda: fig.show(compute(llm, Inputs())["map"]))}
