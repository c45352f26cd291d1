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
