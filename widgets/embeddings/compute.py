"""Words as rows of SmolLM2's embedding table: cosine similarity, nearest neighbours, a 2-D PCA map.
No Panel, no HTML here: the explorer (widget.py) draws what these functions return with view.py.

    table = llm.embedding_table()            # [vocab, hidden] = [49152, 576]: row i is token i's vector
    w = word_vector(llm, "king")             # " king" is one token: its row
    w = word_vector(llm, "unbelievable")     # three tokens: the mean of their three rows (and it says so)

A word inside a sentence carries its leading space (" king", chapter 2), a different token from "king"
at the start of a text; ``leading_space`` picks which one the reader means. ``compute`` gathers
everything the widget shows for one set of inputs, as plain data (what the saved example stores).
"""
from __future__ import annotations

from dataclasses import dataclass

import regex
import torch

from widgets.common.cache import cached
from widgets.common.text import show_token

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
class WordVector:
    word: str                      # what the reader typed
    text: str                      # what was tokenized (with its leading space, if asked)
    ids: list[int]
    pieces: list[str]              # each token's text
    vector: torch.Tensor           # [hidden], float32

    @property
    def how(self) -> str:
        """Which rows were compared, in words (plain text)."""
        shown = " · ".join(show_token(p) for p in self.pieces)
        if len(self.ids) == 1:
            return f"“{shown}” is one token (id {self.ids[0]}): its row of the table"
        return (f"“{show_token(self.text)}” is {len(self.ids)} tokens ({shown}): the average of their "
                f"{len(self.ids)} rows")


def word_vector(llm, word: str, leading_space: bool = True) -> WordVector:
    word = " ".join(word.split())
    if not word:
        raise ValueError("type a word first")
    text = " " + word if leading_space else word
    ids = llm.tokenizer.encode(text).ids
    rows = llm.embedding_table()[ids].float()
    return WordVector(word, text, ids, [llm.tokenizer.decode([i]) for i in ids], rows.mean(0))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=0))


def _row_norms(llm) -> torch.Tensor:
    """Length of every row, computed once per server (the table never changes)."""
    return cached(llm, "embedding-row-norms", (),
                  lambda: llm.embedding_table().float().norm(dim=1).clamp_min(1e-12))


def nearest(llm, query: WordVector, k: int = 10) -> list[tuple[int, str, float]]:
    """The k rows most similar to the query (cosine), the query's own token left out:
    [(token id, token text, cosine), ...], best first."""
    table = llm.embedding_table()
    q = query.vector.to(table.dtype)
    sims = (table @ q).float() / (_row_norms(llm) * q.float().norm().clamp_min(1e-12))
    if len(query.ids) == 1:
        sims[query.ids[0]] = -2.0                 # a word is trivially its own nearest neighbour
    top = torch.topk(sims, k)
    return [(int(i), llm.tokenizer.decode([int(i)]), float(s)) for s, i in zip(top.values, top.indices)]


def pca_2d(vectors: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Project [n, hidden] onto its two main directions of spread: ([n, 2], share of variance of each).

    PCA centres the points and finds the directions along which they differ most (the top right
    singular vectors); the first two give the flat picture that keeps the most of their differences."""
    x = vectors.float() - vectors.float().mean(0, keepdim=True)
    if x.shape[0] < 2:
        return torch.zeros(x.shape[0], 2), [0.0, 0.0]
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    coords = x @ vh[:2].T
    if coords.shape[1] < 2:
        coords = torch.cat([coords, torch.zeros(coords.shape[0], 2 - coords.shape[1])], dim=1)
    var = s ** 2
    share = (var[:2] / var.sum()).tolist() if float(var.sum()) > 0 else [0.0, 0.0]
    # A direction's sign is arbitrary: fix it so the same words land on the same side every time.
    for j in range(2):
        if coords[:, j].abs().max() > 0 and coords[coords[:, j].abs().argmax(), j] < 0:
            coords[:, j] = -coords[:, j]
    return coords, (share + [0.0, 0.0])[:2]


@dataclass(slots=True, frozen=True)
class TableFacts:
    vocab: int
    hidden: int
    dtype: str                     # in memory here
    bytes_here: int                # measured: numel × element size of the loaded table
    bytes_bf16: int                # modelled: 2 bytes a value
    bytes_q8_0: int                # modelled: Q8_0 keeps 32 values in 34 bytes (32 int8 + one fp16 scale)


def table_facts(llm) -> TableFacts:
    table = llm.embedding_table()
    vocab, hidden = table.shape
    return TableFacts(vocab, hidden, str(table.dtype).removeprefix("torch."), table.numel() * table.element_size(),
                      2 * table.numel(), table.numel() // 32 * 34)


# -- the explorer's inputs, and everything it shows for them -----------------------------------------
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
        coords, share = pca_2d(torch.stack([v.vector for _, v in points]))
        out["map"] = {"share": share, "points": [[name, v.word, " · ".join(show_token(p) for p in v.pieces), len(v.ids), *xy]
                                                 for (name, v), xy in zip(points, coords.tolist())]}
    else:
        out["map"] = {"share": [0.0, 0.0], "points": []}
    f = table_facts(llm)
    out["facts"] = [f.vocab, f.hidden, f.dtype, f.bytes_here, f.bytes_bf16, f.bytes_q8_0]
    return out
