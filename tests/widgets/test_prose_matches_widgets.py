"""What chapters 4 and 7 say about the example their widget shows is true of that example (ux review #10:
chapter 4 spoke of "our 7-token question" over a 5-token sentence; chapter 7 said the dots left of the
dashed line "stay grey" where coloured dots were)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("panel")

CONTENT = Path(__file__).resolve().parents[2] / "content"


def test_chapter_4_counts_the_tokens_of_the_sentence_its_widget_shows(llm):
    from widgets.attention_heatmap.widget import SETUPS

    text = (CONTENT / "04-attention.md").read_text(encoding="utf-8")
    m = re.search(r"For\s+the (\d+)-token sentence in the widget below, `([^`]+)`, that is (\d+) scores, "
                  r"(\d+) of them masked", text)
    assert m, "chapter 4 no longer counts the widget's sentence in this form: update this test with it"
    n, sentence, scores, masked = int(m[1]), m[2], int(m[3]), int(m[4])
    assert sentence == SETUPS["single"]["text"]                      # the sentence the widget opens on
    assert n == len(llm.tokenizer.encode(sentence).ids)               # counted by the engine's tokenizer
    assert scores == n * n and masked == n * (n - 1) // 2
    assert "7-token question" not in text


@pytest.mark.parametrize("text", ["The capital of France is", "In 1989, 3 of the 12 jurors voted 7 to 5.",
                                  "for i in range(10):\n    print(i * 2)"])
def test_chapter_7_left_of_the_line_products_are_small_but_not_grey(llm, text):
    """The chapter's example and the widget's samples, at layer 21 (index 20) for the last token: left of gate = 0
    every product is SiLU(gate) × up with SiLU(gate) in [−0.28, 0), and the largest products are right."""
    from widgets.mlp_activations.compute import swiglu_path
    from widgets.mlp_activations.widget import DEFAULT

    prose = (CONTENT / "07-mlp-block.md").read_text(encoding="utf-8")
    assert "stay grey" not in prose and "between −0.28 and 0" in prose and "large products are all on the right" in prose
    ins = llm.inspect(text)
    p = swiglu_path(ins, DEFAULT["layer"], len(ins.tokens) - 1)
    left = p.gate < 0
    assert np.all((p.silu[left] >= -0.2785) & (p.silu[left] < 0))
    assert np.abs(p.product[left]).max() < np.abs(p.product[~left]).max()
    assert np.abs(p.product[left]).max() > 0                         # not grey: some colour is there


def test_one_layer_numbering_in_chapters_4_to_9_and_their_widgets():
    """Chapters 4, 5 and 7 name layers 1-30, as chapter 8's blocks are named (content review X4: chapter 4's
    "layer 13" was chapter 8's "block 14"). Each number the prose quotes is its widget's first layer as the
    widget's slider shows it, and every slider runs 1-30."""
    from tests.helpers.fakes import FakeHandle
    from widgets.attention_heatmap.widget import SETUPS, AttentionHeatmap
    from widgets.common.handle import EngineStatus
    from widgets.forward_pass.widget import ForwardPassWidget
    from widgets.mlp_activations.widget import DEFAULT, MLPActivations

    def said(name: str) -> str:
        return " ".join((CONTENT / name).read_text(encoding="utf-8").split())     # line breaks as spaces

    ch4, ch5, ch7, ch8 = (said(n) for n in ("04-attention.md", "05-multi-head-attention.md", "07-mlp-block.md",
                                             "08-transformer-block.md"))
    assert "Layers count from 1 (bottom) to 30, as chapter 8's blocks do" in ch4
    assert "Blocks are numbered 1 to 30, the same numbers as chapter 4's layers" in ch8
    for chapter, setup in ((ch4, "single"), (ch5, "heads")):
        layer, head = SETUPS[setup]["layer"], SETUPS[setup]["head"]       # the engine's 0-based index
        assert f"At layer {layer + 1}, head {head}," in chapter
        assert f"layer {layer}," not in chapter
        w = AttentionHeatmap(FakeHandle(EngineStatus.LOADING), setup=setup)
        assert (w._layer.start, w._layer.end, w._layer.value) == (1, 30, layer + 1)
    assert f"a neuron of layer {DEFAULT['layer'] + 1} for" in ch7
    w = MLPActivations(FakeHandle(EngineStatus.LOADING))
    assert (w._layer.start, w._layer.end, w._layer.value) == (1, 30, DEFAULT["layer"] + 1)
    w = ForwardPassWidget(FakeHandle(EngineStatus.LOADING), view="block")
    assert (w._block.start, w._block.end) == (1, 30)
