"""The online-softmax step shared by the attention kernels (the FlashAttention trick).

Attention over a long context is computed one KV tile at a time without ever holding all the
scores. Each query row carries three running values: m (the largest score seen), l (the sum of
exp(score - m)), and acc (the exp-weighted sum of values). A new tile with a larger maximum rescales
what came before by exp(m_old - m_new); at the end, acc / l is exactly softmax(scores) @ V.
Scores arrive pre-multiplied by log2(e), so exp2 stands in for exp.
"""
import triton
import triton.language as tl


@triton.jit
def online_softmax_step(m, l, acc, s, v, DOT_PRECISION: tl.constexpr):
    """Fold one tile into the running state. s: [rows, tile] scores (-inf where hidden); v: [tile, dim]."""
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)                      # how much the old running sums shrink
    p = tl.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l, acc
