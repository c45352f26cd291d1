"""The tiny random model the engine tests run on: small enough that a step takes a millisecond on CPU,
with GQA (4 query heads over 2 KV heads) so the paged path is exercised in full."""
from engine.config import ModelConfig

TINY = ModelConfig(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                   intermediate_size=128, vocab_size=256, max_position_embeddings=2048, name="tiny-random")

# The GPU tests' small model: a bit wider, with a 512-token vocabulary and a 4,096-token context.
SMALL = ModelConfig(num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=32,
                    intermediate_size=256, vocab_size=512, max_position_embeddings=4096, name="small-random")

# A chat template for the tiny model's byte tokenizer (plain text: there are no special tokens to spend).
TINY_CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}")
TINY_EOS = 0          # byte 0, which no test text contains


def tiny_model_folder(path, config=TINY, seed: int = 0):
    """The tiny random model written as a Hugging Face folder (config.json, model.safetensors, tokenizer.json
    with the byte tokenizer, tokenizer_config.json with a chat template and EOS), so that `LLM(model=path)`
    loads it through the front door like any other model. Returns the path."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    from engine.loader.hf_folder import _HF_NAMES
    from engine.loader.tokenizer import byte_tokenizer
    from engine.model.llama import Llama

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    ours = {v: k for k, v in _HF_NAMES.items()}
    tensors = {}
    for name, w in Llama.random(config, seed=seed).state_dict().items():
        if name == "embed.weight":
            tensors["model.embed_tokens.weight"] = w
        elif name == "norm.weight":
            tensors["model.norm.weight"] = w
        elif name.startswith("layers."):
            _, layer, rest = name.split(".", 2)
            tensors[f"model.layers.{layer}.{ours[rest.removesuffix('.weight')]}.weight"] = w
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": config.num_layers, "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim, "intermediate_size": config.intermediate_size, "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_position_embeddings, "rope_theta": config.rope_theta,
        "tie_word_embeddings": True, "eos_token_id": TINY_EOS}))
    tokenizer = byte_tokenizer()
    tokenizer.tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": tokenizer.tok.id_to_token(TINY_EOS), "chat_template": TINY_CHAT_TEMPLATE}))
    return path
