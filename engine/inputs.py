"""What `LLM.generate`, `LLM.chat` and `LLM.stream` accept (vLLM's forms), parsed into exactly what runs.

    "The capital of France is"                       text: tokenized as it is (no special tokens added)
    {"prompt": "The capital of France is"}           vLLM's TextPrompt: the same
    {"prompt_token_ids": [504, 3575, 282]}           vLLM's TokensPrompt: these ids, as they are
    {"prompt_token_ids": [...], "prompt": "..."}     ... with the text they came from, reported back
    [any of these, ...]                              one request each, in order

    chat: [{"role": "user", "content": "Hi"}, ...]   one conversation (or a list of them), rendered by the
                                                      model's chat template, then tokenized

Anything else is refused with a ValueError or TypeError that names the place (`prompts[2]['prompt_token_ids'][5]`):
an unknown key, an empty prompt, an id outside the vocabulary, a prompt too long for the context, a
value of the wrong type. Nothing is guessed: a dict is never read as its keys, a list of ints is never
taken for a prompt (which prompt would it be?), a number is never turned into text.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import TypedDict

from .loader.tokenizer import TextTokenizer
from .sampling_params import SamplingParams


class TextPrompt(TypedDict):
    prompt: str                          # text, tokenized by the model's tokenizer


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: list[int]          # required: the token ids the model reads, as they are
    prompt: str                          # optional: the text they came from (reported back, never tokenized)


PromptType = str | TextPrompt | TokensPrompt
CHAT_ROLES = ("system", "user", "assistant")


@dataclass(slots=True)
class ParsedPrompt:
    token_ids: list[int]                 # exactly what the model reads
    text: str | None                     # RequestOutput.prompt: the text, or None for bare token ids


def parse_prompts(prompts, tokenizer: TextTokenizer, vocab_size: int) -> list[ParsedPrompt]:
    """One ParsedPrompt per prompt of `generate(prompts)`: a str, a dict, or a list or tuple of those."""
    if isinstance(prompts, (str, dict)):
        return [parse_prompt(prompts, tokenizer, vocab_size, "prompts")]
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts must be a string, a TextPrompt or TokensPrompt dict, or a list of them; "
                        f"got {type(prompts).__name__}")
    return [parse_prompt(p, tokenizer, vocab_size, f"prompts[{i}]") for i, p in enumerate(prompts)]


def parse_prompt(prompt, tokenizer: TextTokenizer, vocab_size: int, where: str = "prompt") -> ParsedPrompt:
    """One prompt: text, {"prompt": text} or {"prompt_token_ids": ids[, "prompt": text]}."""
    if isinstance(prompt, str):
        return ParsedPrompt(_encode(prompt, tokenizer, where), prompt)
    if not isinstance(prompt, dict):
        hint = " (token ids go in a TokensPrompt: {'prompt_token_ids': [...]})" if isinstance(prompt, (Integral, list)) else ""
        raise TypeError(f"{where} must be a string or a TextPrompt / TokensPrompt dict, got {type(prompt).__name__}{hint}")
    unknown = sorted(map(repr, set(prompt) - {"prompt", "prompt_token_ids"}))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (a TextPrompt has 'prompt'; a TokensPrompt "
                         f"has 'prompt_token_ids' and, optionally, 'prompt')")
    text = prompt.get("prompt")
    if "prompt" in prompt and not isinstance(text, str):      # present means text, never None or a number
        raise TypeError(f"{where}['prompt'] must be a string, got {type(text).__name__}")
    if "prompt_token_ids" in prompt:
        ids = _token_ids(prompt["prompt_token_ids"], vocab_size, f"{where}['prompt_token_ids']")
        return ParsedPrompt(ids, text)
    if text is None:
        raise ValueError(f"{where}: a TextPrompt needs 'prompt' (or give 'prompt_token_ids')")
    return ParsedPrompt(_encode(text, tokenizer, f"{where}['prompt']"), text)


def _encode(text: str, tokenizer: TextTokenizer, where: str) -> list[int]:
    if not text:
        raise ValueError(f"{where} is empty: a prompt needs at least one token")
    ids = tokenizer.encode_ids(text)
    if not ids:
        raise ValueError(f"{where} ({text!r}) tokenizes to no tokens")
    return ids


def _token_ids(ids, vocab_size: int, where: str) -> list[int]:
    if not isinstance(ids, (list, tuple)):
        raise TypeError(f"{where} must be a list of token ids, got {type(ids).__name__}")
    if not ids:
        raise ValueError(f"{where} is empty: a prompt needs at least one token")
    for i, t in enumerate(ids):
        if not isinstance(t, Integral) or isinstance(t, bool):
            raise TypeError(f"{where}[{i}] must be an integer token id, got {t!r}")
        if not 0 <= t < vocab_size:
            raise ValueError(f"{where}[{i}]: {t} is outside the vocabulary [0, {vocab_size})")
    return [int(t) for t in ids]


def sampling_params_for(sampling_params, num_prompts: int) -> list[SamplingParams]:
    """None (vLLM's defaults), one SamplingParams for every prompt, or a list with one per prompt."""
    if sampling_params is None:
        return [SamplingParams() for _ in range(num_prompts)]
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * num_prompts
    if not isinstance(sampling_params, (list, tuple)):
        raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(sampling_params).__name__}")
    if len(sampling_params) != num_prompts:
        raise ValueError(f"sampling_params: {len(sampling_params)} SamplingParams for {num_prompts} prompts "
                         f"(give one, or one per prompt)")
    for i, p in enumerate(sampling_params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{i}] must be a SamplingParams, got {type(p).__name__}")
    return list(sampling_params)


def check_context(prompts: list[ParsedPrompt], params: list[SamplingParams], max_model_len: int,
                  where: str = "prompts") -> None:
    """Refuse, before anything runs, a prompt whose tokens (with max_tokens) do not fit the context."""
    for i, (prompt, p) in enumerate(zip(prompts, params)):
        p.check()                              # a field may have been set after construction
        n = len(prompt.token_ids)
        name = where if len(prompts) == 1 else f"{where}[{i}]"
        if n >= max_model_len:
            raise ValueError(f"{name} is {n} tokens long: the engine's context (max_model_len) is {max_model_len}, "
                             f"and at least one token must be generated")
        if p.max_tokens is not None and n + p.max_tokens > max_model_len:
            raise ValueError(f"{name} is {n} tokens long: with max_tokens={p.max_tokens} it exceeds the engine's "
                             f"context, max_model_len {max_model_len}")


def parse_conversations(messages) -> list[list[dict[str, str]]]:
    """`chat(messages)`: one conversation (a list of message dicts) or a list of conversations, each
    message {"role": "system" | "user" | "assistant", "content": text or [{"type": "text", "text": ...}]}."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(f"messages must be a non-empty list of message dicts (or of conversations), "
                        f"got {messages!r:.60}")
    if all(isinstance(m, dict) for m in messages):
        return [_conversation(messages, "messages")]
    if all(isinstance(c, (list, tuple)) for c in messages):
        return [_conversation(c, f"messages[{i}]") for i, c in enumerate(messages)]
    raise TypeError("messages must be a list of message dicts (one conversation) or a list of such lists, not a mix")


def _conversation(conversation, where: str) -> list[dict[str, str]]:
    if not conversation:
        raise ValueError(f"{where} is an empty conversation")
    out = []
    for i, m in enumerate(conversation):
        at = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise TypeError(f"{at} must be a dict with 'role' and 'content', got {type(m).__name__}")
        unknown = sorted(map(repr, set(m) - {"role", "content"}))
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {', '.join(unknown)} (a message has 'role' and 'content')")
        if m.get("role") not in CHAT_ROLES:
            raise ValueError(f"{at}['role'] must be one of {', '.join(CHAT_ROLES)}, got {m.get('role')!r}")
        out.append({"role": m["role"], "content": _content(m.get("content"), f"{at}['content']")})
    return out


def _content(content, where: str) -> str:
    """Text, or OpenAI's list of parts where every part is {"type": "text", "text": ...} (joined)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TypeError(f"{where} must be a string or a list of text parts, got {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or set(part) != {"type", "text"} \
                or not isinstance(part["text"], str):
            raise ValueError(f"{where}[{j}] must be {{'type': 'text', 'text': str}} (only text is supported), "
                             f"got {part!r:.80}")
        texts.append(part["text"])
    return "".join(texts)


def render_chat(conversation: list[dict[str, str]], tokenizer: TextTokenizer, chat_template: str | None = None,
                add_generation_prompt: bool = True) -> str:
    """The conversation as the text the model was trained on: the model's chat template (or the given one)."""
    if chat_template is None:
        return tokenizer.apply_chat_template(conversation, add_generation_prompt=add_generation_prompt)
    if not isinstance(chat_template, str):
        raise TypeError(f"chat_template must be a Jinja template string, got {type(chat_template).__name__}")
    from jinja2 import Template
    return Template(chat_template).render(messages=conversation, add_generation_prompt=add_generation_prompt)
