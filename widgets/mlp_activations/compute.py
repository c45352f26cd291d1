"""The numbers behind the MLP widget (chapter 7): one token's SwiGLU path, and one neuron's tokens.

    x (576) ─► RMSNorm ─► W_gate ─► gate (1536) ─► SiLU ─┐
                      └─► W_up   ─► up   (1536) ─────────×─► product (1536) ─► W_down ─► (576), added back

`llm.inspect` records all three for every layer and token, as the layer computed them: the gate
W_gate·RMSNorm(h), the up projection W_up·RMSNorm(h), and their product SiLU(gate) × up (the input of
W_down). One pass per sentence is kept per server (`widgets.common.cache.inspection`); choosing another
layer, token or neuron only reads another slice of it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch.nn.functional as F

from widgets.common.cache import inspection

TOP = 10                 # neurons listed for a token


@dataclass(slots=True)
class SwiGLUPath:
    layer: int
    token: int
    gate: np.ndarray         # [1536] W_gate · RMSNorm(h), before SiLU: inspect's gate[layer, token]
    silu: np.ndarray         # [1536] SiLU(gate): how far each feature is let through
    up: np.ndarray           # [1536] W_up · RMSNorm(h), the features: inspect's up[layer, token]
    product: np.ndarray      # [1536] SiLU(gate) × up, exactly inspect's mlp_activations[layer, token]

    def top(self, k: int = TOP) -> list[int]:
        """The neurons with the largest |product| for this token, largest first."""
        return [int(i) for i in np.argsort(-np.abs(self.product), kind="stable")[:k]]


def swiglu_path(ins, layer: int, token: int) -> SwiGLUPath:
    gate = ins.gate[layer, token]
    return SwiGLUPath(layer, token, gate.numpy(), F.silu(gate).numpy(), ins.up[layer, token].numpy(),
                      ins.mlp_activations[layer, token].numpy())


def neuron_profile(ins, layer: int, neuron: int) -> np.ndarray:
    """One neuron's product (SiLU(gate) × up) for every token of the sentence, [T]."""
    return ins.mlp_activations[layer, :, neuron].numpy()


def strongest_tokens(profile: np.ndarray, k: int = 5) -> list[int]:
    """Tokens that drive a neuron hardest (largest |product|), strongest first."""
    return [int(i) for i in np.argsort(-np.abs(profile), kind="stable")[:k]]


def path_json(path: SwiGLUPath, tokens: list[str], profile: np.ndarray, neuron: int) -> dict:
    """What the widget draws, as plain data (also the saved first example)."""
    return {"tokens": tokens, "layer": path.layer, "token": path.token, "neuron": neuron,
            "gate": path.gate.tolist(), "up": path.up.tolist(), "product": path.product.tolist(),
            "top": path.top(), "profile": profile.tolist()}


def compute(llm, text: str, layer: int, token: int | None, neuron: int | None) -> tuple[dict, str | None, float]:
    """(the widget's data, the token-limit note, seconds of the forward pass). ``token`` None = the
    last token; ``neuron`` None = the strongest neuron of the chosen token."""
    ins, note, took = inspection(llm, text)
    T = len(ins.tokens)
    token = T - 1 if token is None else min(max(int(token), 0), T - 1)
    path = swiglu_path(ins, layer, token)
    neuron = path.top(1)[0] if neuron is None else int(neuron)
    d = path_json(path, list(ins.tokens), neuron_profile(ins, layer, neuron), neuron)
    d["silu"] = path.silu.tolist()
    return d, note, took
