"""The numbers behind the MLP widget (chapter 7): one token's SwiGLU path, and one neuron's tokens.

    x (576) ─► RMSNorm ─► W_gate ─► gate (1536) ─► SiLU ─┐
                      └─► W_up   ─► up   (1536) ─────────×─► product (1536) ─► W_down ─► (576), added back

`llm.inspect` reports the product (the input of W_down) for every layer and token, and the hidden
state after each block. The gate and up values are recovered from those with the layer's own weights:
the state entering the MLP is the block's output minus what the MLP added, h = out − W_down·product;
then gate = W_gate·RMSNorm(h) and up = W_up·RMSNorm(h). SiLU(gate) × up gives back `inspect`'s
product to float rounding (tests/unit/test_widget_mlp.py checks it), so nothing here is re-derived.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

TOP = 10                 # neurons listed for a token


@dataclass(slots=True)
class SwiGLUPath:
    layer: int
    token: int
    gate: np.ndarray         # [1536] W_gate · RMSNorm(h), before SiLU
    silu: np.ndarray         # [1536] SiLU(gate): how far each feature is let through
    up: np.ndarray           # [1536] W_up · RMSNorm(h): the features
    product: np.ndarray      # [1536] SiLU(gate) × up, exactly inspect's mlp_activations[layer, token]

    def top(self, k: int = TOP) -> list[int]:
        """The neurons with the largest |product| for this token, largest first."""
        return [int(i) for i in np.argsort(-np.abs(self.product), kind="stable")[:k]]


@torch.inference_mode()
def swiglu_path(llm, ins, layer: int, token: int) -> SwiGLUPath:
    block = llm.model.layers[layer]
    p = llm.model.embed.weight                            # the model's device and dtype
    product = ins.mlp_activations[layer, token]
    out = ins.hidden_states[layer + 1, token]
    down = block.mlp.w2(product.to(p.device, p.dtype)).float().cpu()
    h = (out - down).to(p.device, p.dtype)                # the residual stream entering the MLP
    normed = block.ffn_norm(h[None])
    gate = block.mlp.w1(normed)[0].float().cpu()
    up = block.mlp.w3(normed)[0].float().cpu()
    return SwiGLUPath(layer, token, gate.numpy(), F.silu(gate).numpy(), up.numpy(), product.numpy())


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
