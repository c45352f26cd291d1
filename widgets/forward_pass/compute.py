"""The numbers behind the forward-pass widget (chapters 8–9), from one `llm.inspect(text)`:

* ``block_stages``: one block, stage by stage, for one token. Each stage's tensor shape is the shape
  of the whole tensor the block computes (all n tokens at once); the vector is this token's row.

      x ─► RMSNorm ─► attention ─► (+) ─► RMSNorm ─► MLP ─► (+) ─► next block
      │                             ▲ │                      ▲
      └──────── residual ───────────┘ └────── residual ──────┘

  Every stage is what inspect recorded as the model ran the block (the stream entering it, the
  normalised inputs, what attention and the MLP added, the stream between the two adds), so the
  last stage is inspect's stream entering the next block.
* ``residual_norms``: the length of every token's residual-stream vector after each layer.
* ``logit_lens``: the final RMSNorm and the LM head applied to the stream after each layer
  (`Inspection.logit_lens`) — what the model would predict if it stopped there. After the last
  layer it is the model's prediction.
* ``pass_data``: all of it as the JSON-able record the page paints (and the saved example stores).

One pass per sentence is kept per server (`widgets.common.cache.inspection`); another token or block
only reads another slice of it. Pure functions of the engine's records: no Panel here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from widgets.common.text import show_token


@dataclass(slots=True)
class Stage:
    key: str                          # "x", "norm1", "attention", "add1", "norm2", "mlp", "add2"
    title: str
    formula: str
    shapes: list[tuple[str, list[int]]]   # (tensor, shape) of the whole tensors this stage makes
    vector: list[float]               # this token's output row of the stage
    facts: list[tuple[str, str]] = field(default_factory=list)   # (what, value) lines for the page


STAGE_TITLES = ["Block input", "RMSNorm", "Attention", "Residual add", "RMSNorm", "MLP (SwiGLU)",
                "Residual add"]


def _norm(v: torch.Tensor) -> float:
    return float(v.float().norm())


def _rms(v: torch.Tensor) -> float:
    return float(v.float().pow(2).mean().sqrt())


def _top_dims(v: torch.Tensor, k: int = 3) -> str:
    idx = v.abs().topk(k).indices.tolist()
    return ", ".join(f"#{i} ({float(v[i]):+.2f})" for i in idx)


def block_stages(llm, ins, layer: int, token: int) -> list[Stage]:
    """The seven stages of block ``layer`` (0-based) for position ``token`` of an inspection."""
    cfg = llm.config
    n, d, heads, kv_heads, hd = len(ins.token_ids), cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim

    x = ins.hidden_states[layer]                                    # [n, d]: the stream entering
    a_in = ins.attention_in[layer]                                  # RMSNorm(x)
    probs = ins.attention[layer]                                    # [heads, n, n]
    attn = ins.attention_out[layer]                                 # [n, d]: wo · the heads' mixed values
    h = ins.mid_states[layer]                                       # x + attention
    m_in = ins.mlp_in[layer]                                        # RMSNorm(h)
    acts = ins.mlp_activations[layer]                               # [n, intermediate]: silu(gate) * up
    mlp = ins.mlp_out[layer]                                        # w2 · acts
    out = ins.hidden_states[layer + 1]                              # h + MLP: the next block's input

    t = token
    looked = probs[:, t].mean(0)                                    # head-averaged attention of this token
    top = looked[: t + 1].topk(min(3, t + 1))
    attended = ", ".join(f"“{show_token(ins.tokens[j])}” {w:.0%}" for w, j in zip(top.values.tolist(), top.indices.tolist()))
    strong = int((acts[t].abs() > 0.1 * acts[t].abs().max()).sum())
    mlp_top = acts[t].abs().topk(3).indices.tolist()
    I = cfg.intermediate_size

    def add_facts(before, delta, after):
        cos = float(torch.nn.functional.cosine_similarity(before, after, dim=0))
        return [("length before → after", f"{_norm(before):,.1f} → {_norm(after):,.1f}"),
                ("length of what was added", f"{_norm(delta):,.1f} ({_norm(delta) / max(_norm(before), 1e-9):.0%} of the stream)"),
                ("direction kept (cosine before/after)", f"{cos:.2f}")]

    return [
        Stage("x", STAGE_TITLES[0], f"x = residual stream entering block {layer + 1}", [("x", [n, d])], x[t].tolist(),
              [("length ‖x‖", f"{_norm(x[t]):,.1f}"), ("root mean square", f"{_rms(x[t]):.3f}"),
               ("largest entries", _top_dims(x[t]))]),
        Stage("norm1", STAGE_TITLES[1], "x / rms(x) · g", [("RMSNorm(x)", [n, d])], a_in[t].tolist(),
              [("divided by rms(x)", f"{_rms(x[t]):.3f}"), ("length after", f"{_norm(a_in[t]):,.1f}"),
               ("largest entries", _top_dims(a_in[t]))]),
        Stage("attention", STAGE_TITLES[2], "wo · softmax(q·kᵀ/√64) · v",
              [("q", [n, heads, hd]), ("k", [n, kv_heads, hd]), ("v", [n, kv_heads, hd]),
               ("probabilities", [heads, n, n]), ("output", [n, d])], attn[t].tolist(),
              [("attends most to (mean of 9 heads)", attended), ("length of the output", f"{_norm(attn[t]):,.1f}")]),
        Stage("add1", STAGE_TITLES[3], "h = x + attention", [("h", [n, d])], h[t].tolist(), add_facts(x[t], attn[t], h[t])),
        Stage("norm2", STAGE_TITLES[4], "h / rms(h) · g", [("RMSNorm(h)", [n, d])], m_in[t].tolist(),
              [("divided by rms(h)", f"{_rms(h[t]):.3f}"), ("length after", f"{_norm(m_in[t]):,.1f}"),
               ("largest entries", _top_dims(m_in[t]))]),
        Stage("mlp", STAGE_TITLES[5], "w2 · (silu(w1·h) ⊙ w3·h)",
              [("gate w1·h", [n, I]), ("up w3·h", [n, I]), ("silu(gate) ⊙ up", [n, I]), ("output", [n, d])],
              mlp[t].tolist(),
              [(f"neurons above 10% of the strongest (of {I:,})", f"{strong:,}"),
               ("strongest neurons", ", ".join(f"#{i} ({float(acts[t, i]):+.2f})" for i in mlp_top)),
               ("length of the output", f"{_norm(mlp[t]):,.1f}")]),
        Stage("add2", STAGE_TITLES[6], f"out = h + MLP → block {layer + 2}" if layer + 1 < cfg.num_layers
              else "out = h + MLP → final RMSNorm and LM head", [("out", [n, d])], out[t].tolist(),
              add_facts(h[t], mlp[t], out[t])),
    ]


def residual_norms(ins) -> list[list[float]]:
    """[layers + 1][n]: ‖stream‖ of each token after the embedding (row 0) and after each block."""
    return ins.hidden_states.float().norm(dim=-1).tolist()


@dataclass(slots=True)
class LensRow:
    layer: int                       # 0 = the embeddings, l = after block l
    top: list[tuple[int, float]]     # (token id, probability), most likely first
    answer_p: float                  # probability of the model's final prediction at this layer
    answer_rank: int                 # its rank at this layer (1 = top)


def lens_logits(ins, token: int) -> torch.Tensor:
    """[layers + 1, vocab]: final RMSNorm + LM head applied to the stream of position ``token``
    after each layer. The last row is the model's own logits for that position."""
    return ins.logit_lens(token)


def logit_lens(ins, token: int, k: int = 5) -> list[LensRow]:
    probs = torch.softmax(lens_logits(ins, token), dim=-1)
    answer = int(probs[-1].argmax())
    rows = []
    for layer, p in enumerate(probs):
        top = p.topk(k)
        rank = int((p > p[answer]).sum()) + 1
        rows.append(LensRow(layer, list(zip(top.indices.tolist(), top.values.tolist())), float(p[answer]), rank))
    return rows


# -- JSON-able pieces for the page (the saved first example has the same form) --------------------
def stages_data(llm, ins, layer: int, token: int) -> list[dict]:
    return [{"key": s.key, "title": s.title, "formula": s.formula, "shapes": [[name, shape] for name, shape in s.shapes],
             "vector": s.vector, "facts": [list(f) for f in s.facts]} for s in block_stages(llm, ins, layer, token)]


def lens_data(llm, ins, token: int, k: int = 5) -> list[dict]:
    """Per layer: the top-k tokens [id, text, p], and the final prediction's probability and rank."""
    decode = llm.tokenizer.decode
    return [{"layer": r.layer, "top": [[i, decode([i]), p] for i, p in r.top], "answer_p": r.answer_p,
             "answer_rank": r.answer_rank} for r in logit_lens(ins, token, k)]


def pass_data(llm, text: str, ins, block: int, token: int) -> dict:
    """Everything the page paints, JSON-able (the saved example has this form)."""
    return {"text": text, "tokens": ins.tokens, "token_ids": ins.token_ids, "block": block,
            "token": token, "norms": residual_norms(ins), "stages": stages_data(llm, ins, block - 1, token),
            "lens": lens_data(llm, ins, token)}
