"""What the two generation endpoints accept: an OpenAI request body, read into the engine's own terms
(ParsedPrompts and one SamplingParams), or refused with a 400 that names the field.

    POST /v1/completions        {"model", "prompt": text | [text, ...] | [ids] | [[ids], ...], "max_tokens", ...}
    POST /v1/chat/completions   {"model", "messages": [{"role", "content"}, ...], "max_completion_tokens", ...}

    OpenAI field                          SamplingParams field
    max_tokens, max_completion_tokens     max_tokens      (completions: 16 if absent; chat: what the context leaves)
    temperature, top_p, n, seed, stop     the same names
    presence_penalty, frequency_penalty   the same names (-2 to 2)
    logit_bias {"token id": bias}         logit_bias {id: bias} (-100 to 100)
    logprobs: k (completions)             logprobs = k
    logprobs: true, top_logprobs: k (chat)  logprobs = k (0 without top_logprobs)
    top_k, min_p, repetition_penalty,     vLLM's extra fields (the `openai` client sends them with extra_body),
    min_tokens, stop_token_ids, ignore_eos  the same names

A JSON null is read as the field left out. A field neither endpoint knows is refused by name, as is a
value this engine cannot honour (echo, suffix, tools, a response_format other than text, best_of other
than n): the request is never served as if it had not asked. The prompt is parsed by engine/inputs.py,
whose messages name the place (`prompt[1][3]`, `messages[0]['role']`); a prompt that does not fit the
context with its max_tokens is refused before anything runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from numbers import Integral

from ..inputs import ParsedPrompt, check_context, parse_conversations, parse_prompt, render_chat
from ..loader.tokenizer import TextTokenizer
from ..sampling_params import SamplingParams
from .errors import APIError, bad_request

# request field -> SamplingParams field, for the fields both endpoints share
SAMPLING_FIELDS = {
    "max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "n": "n", "seed": "seed",
    "stop": "stop", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
    # vLLM's extra sampling fields
    "top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty", "min_tokens": "min_tokens",
    "stop_token_ids": "stop_token_ids", "ignore_eos": "ignore_eos",
}
COMMON_FIELDS = {"model", "stream", "stream_options", "user", *SAMPLING_FIELDS}
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "logprobs", "echo", "suffix", "best_of"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "logprobs", "top_logprobs", "max_completion_tokens", "response_format",
                               "tools", "tool_choice", "parallel_tool_calls", "add_generation_prompt"}
# OpenAI fields this engine does not implement, with the values that ask for nothing (accepted)
NOT_USED = {"echo": [False], "suffix": [""], "tools": [[]], "tool_choice": ["none"],
            "response_format": [{"type": "text"}]}
MESSAGE_ROLES = {"developer": "system"}      # OpenAI's newer name for the system turn


@dataclass(slots=True)
class ModelLimits:
    """What a request is checked against: the served model and this server's limits."""
    tokenizer: TextTokenizer
    vocab_size: int
    max_model_len: int
    model_names: tuple[str, ...]         # the names `model` may take (the first is the one reported)
    max_tokens_limit: int | None = None  # the most tokens one completion may ask for (None: the context)
    max_prompts: int = 64                # prompts in one /v1/completions request
    max_prompt_tokens: int | None = None # the longest prompt this server takes (None: the context)


@dataclass(slots=True)
class ApiRequest:
    """One request, read: what runs (prompts x params) and how to answer."""
    kind: str                            # "completion" | "chat"
    model: str
    prompts: list[ParsedPrompt]          # one per prompt (chat: the rendered conversation)
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False          # stream_options.include_usage: a last chunk with the token counts
    top_logprobs: int | None = None      # None: no logprobs in the answer; k: the chosen token and the top k


def json_type(value) -> str:
    """A value's JSON type, for messages about what came instead."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number"}.get(type(value), "value")


def parse_completion(body, limits: ModelLimits) -> ApiRequest:
    fields = _fields(body, COMPLETION_FIELDS, "/v1/completions")
    if "prompt" not in fields:
        raise bad_request("prompt is required", "prompt")
    if "best_of" in fields and fields["best_of"] != fields.get("n", 1):
        raise bad_request(f"best_of={fields['best_of']!r} is not supported by this engine (only best_of = n)", "best_of")
    logprobs = fields.get("logprobs")
    params = _sampling_params(fields, {"max_tokens": 16}, {"logprobs": logprobs} if logprobs is not None else {},
                              limits)
    prompts = _completion_prompts(fields["prompt"], limits)
    _check_context(prompts, params, limits, "prompt")
    return ApiRequest("completion", _model(fields, limits), prompts, params, *_stream(fields), top_logprobs=logprobs)


def parse_chat(body, limits: ModelLimits) -> ApiRequest:
    fields = _fields(body, CHAT_FIELDS, "/v1/chat/completions")
    if "messages" not in fields:
        raise bad_request("messages is required", "messages")
    names = {"logprobs": "top_logprobs"}                          # SamplingParams field -> the request's name
    if "max_completion_tokens" in fields:
        names["max_tokens"] = "max_completion_tokens"
        if "max_tokens" in fields and fields["max_tokens"] != fields["max_completion_tokens"]:
            raise bad_request("max_tokens and max_completion_tokens differ: give one", "max_completion_tokens")
        fields["max_tokens"] = fields.pop("max_completion_tokens")
    logprobs = _typed(fields, "logprobs", bool, False)
    top = fields.get("top_logprobs")
    if top is not None and not logprobs:
        raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    extra = {"logprobs": 0 if top is None else top} if logprobs else {}
    params = _sampling_params(fields, {"max_tokens": None}, extra, limits, names)
    _typed(fields, "parallel_tool_calls", bool, True)
    add_generation_prompt = _typed(fields, "add_generation_prompt", bool, True)
    prompt = _chat_prompt(fields["messages"], add_generation_prompt, limits)
    _check_context([prompt], params, limits, "messages")
    return ApiRequest("chat", _model(fields, limits), [prompt], params, *_stream(fields),
                      top_logprobs=extra.get("logprobs"))


# -- the body's fields ----------------------------------------------------------------------------------
def _fields(body, known: set[str], endpoint: str) -> dict:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {json_type(body)}")
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad_request(f"unknown field(s) {', '.join(map(repr, unknown))} for {endpoint} "
                          f"(known: {', '.join(sorted(known))})", unknown[0])
    fields = {k: v for k, v in body.items() if v is not None}          # null = left out
    for name, allowed in NOT_USED.items():
        if name in fields and fields[name] not in allowed:
            raise bad_request(f"{name}={fields[name]!r:.80} is not supported by this engine", name)
    _typed(fields, "user", str, "")
    return fields


def _typed(fields: dict, name: str, kind: type, default):
    value = fields.get(name, default)
    if not isinstance(value, kind):
        raise bad_request(f"{name} must be a {json_type(default) if default is not None else kind.__name__}, "
                          f"got {json_type(value)}", name)
    return value


def _model(fields: dict, limits: ModelLimits) -> str:
    model = fields.get("model", limits.model_names[0])
    if not isinstance(model, str):
        raise bad_request(f"model must be a string, got {json_type(model)}", "model")
    if model not in limits.model_names:
        raise APIError(404, f"the model {model!r} does not exist here; this server serves "
                            f"{', '.join(map(repr, limits.model_names))} (GET /v1/models)", "model", "model_not_found")
    return limits.model_names[0]


def _stream(fields: dict) -> tuple[bool, bool]:
    stream = _typed(fields, "stream", bool, False)
    options = fields.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_request("stream_options is only allowed with stream: true", "stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise bad_request(f"stream_options must be {{'include_usage': bool}}, got {options!r:.80}", "stream_options")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise bad_request(f"stream_options.include_usage must be a boolean, got {json_type(include)}",
                          "stream_options")
    return stream, include


_NAMED = re.compile(r"^SamplingParams: (?:a )?([a-z_]+)")


def _sampling_params(fields: dict, defaults: dict, extra: dict, limits: ModelLimits,
                     names: dict[str, str] | None = None) -> SamplingParams:
    kwargs = dict(defaults)
    kwargs.update({SAMPLING_FIELDS[k]: v for k, v in fields.items() if k in SAMPLING_FIELDS})
    kwargs.update(extra)
    asked = {SAMPLING_FIELDS.get(k, k): k for k in fields} | (names or {})   # SamplingParams field -> request's
    if "logit_bias" in kwargs:
        kwargs["logit_bias"] = _logit_bias(kwargs["logit_bias"])
    if isinstance(kwargs.get("stop"), list) and any(not isinstance(s, str) for s in kwargs["stop"]):
        raise bad_request("stop must be a string or a list of strings", "stop")
    cap = limits.max_tokens_limit
    if cap is not None:
        if kwargs["max_tokens"] is None:
            kwargs["max_tokens"] = cap
        elif isinstance(kwargs["max_tokens"], int) and kwargs["max_tokens"] > cap:
            raise bad_request(f"max_tokens is {kwargs['max_tokens']}: this server gives at most {cap} tokens "
                              f"a completion", asked.get("max_tokens", "max_tokens"))
    try:
        return SamplingParams(**kwargs)
    except (TypeError, ValueError) as e:
        message = str(e)
        m = _NAMED.match(message)
        field = m.group(1) if m else None
        param = asked.get(field, field)
        message = message.removeprefix("SamplingParams: ")
        if param is not None and field is not None and param != field:
            message = message.replace(field, param, 1)
        raise bad_request(message, param) from None


def _logit_bias(bias) -> dict[int, float]:
    if not isinstance(bias, dict):
        raise bad_request(f"logit_bias must be an object of token id -> bias, got {json_type(bias)}", "logit_bias")
    out = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise bad_request(f"logit_bias keys must be token ids, got {key!r}", "logit_bias") from None
        out[token] = value
    return out


# -- prompts --------------------------------------------------------------------------------------------
def _completion_prompts(prompt, limits: ModelLimits) -> list[ParsedPrompt]:
    """OpenAI's four forms: a string, a list of strings, a list of token ids, a list of lists of ids."""
    if isinstance(prompt, str):
        return [_text_prompt(prompt, limits, "prompt")]
    if not isinstance(prompt, list) or not prompt:
        raise bad_request("prompt must be a string, a list of strings, a list of token ids or a list of lists of "
                          f"token ids, got {'an empty list' if prompt == [] else json_type(prompt)}", "prompt")
    if all(_is_id(t) for t in prompt):
        return [ParsedPrompt(_token_ids(prompt, limits, "prompt"), None)]
    if len(prompt) > limits.max_prompts:
        raise bad_request(f"prompt has {len(prompt)} prompts: this server takes at most {limits.max_prompts} "
                          f"a request", "prompt")
    out = []
    for i, p in enumerate(prompt):
        where = f"prompt[{i}]"
        if isinstance(p, str):
            out.append(_text_prompt(p, limits, where))
        elif isinstance(p, list):
            out.append(ParsedPrompt(_token_ids(p, limits, where), None))
        else:
            raise bad_request(f"{where} must be a string or a list of token ids, got {json_type(p)}", "prompt")
    return out


def _is_id(t) -> bool:
    return isinstance(t, Integral) and not isinstance(t, bool)


def _text_prompt(text: str, limits: ModelLimits, where: str) -> ParsedPrompt:
    try:
        return parse_prompt(text, limits.tokenizer, limits.vocab_size, where)
    except (TypeError, ValueError) as e:
        raise bad_request(str(e), "prompt") from None


def _token_ids(ids: list, limits: ModelLimits, where: str) -> list[int]:
    if not ids:
        raise bad_request(f"{where} is empty: a prompt needs at least one token", "prompt")
    for i, t in enumerate(ids):
        if not _is_id(t):
            raise bad_request(f"{where}[{i}] must be an integer token id, got {json_type(t)}", "prompt")
        if not 0 <= t < limits.vocab_size:
            raise bad_request(f"{where}[{i}]: {t} is outside the vocabulary [0, {limits.vocab_size})", "prompt")
    return [int(t) for t in ids]


def _chat_prompt(messages, add_generation_prompt: bool, limits: ModelLimits) -> ParsedPrompt:
    if not isinstance(messages, list) or not messages:
        raise bad_request(f"messages must be a non-empty array of message objects, got "
                          f"{'an empty array' if messages == [] else json_type(messages)}", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}] must be an object with 'role' and 'content', got {json_type(m)}",
                              "messages")
    messages = [{**m, "role": MESSAGE_ROLES.get(m.get("role"), m.get("role"))} if "role" in m else m
                for m in messages]
    try:
        [conversation] = parse_conversations(messages)
        text = render_chat(conversation, limits.tokenizer, None, add_generation_prompt)
        return parse_prompt(text, limits.tokenizer, limits.vocab_size, "messages (rendered)")
    except (TypeError, ValueError) as e:
        raise bad_request(str(e), "messages") from None


def _check_context(prompts: list[ParsedPrompt], params: SamplingParams, limits: ModelLimits, where: str) -> None:
    cap = limits.max_prompt_tokens
    for i, prompt in enumerate(prompts):
        if cap is not None and len(prompt.token_ids) > cap:
            name = where if len(prompts) == 1 else f"{where}[{i}]"
            raise bad_request(f"{name} is {len(prompt.token_ids)} tokens long: this server takes prompts of at "
                              f"most {cap} tokens", where)
    try:
        check_context(prompts, [params] * len(prompts), limits.max_model_len, where)
    except ValueError as e:
        raise bad_request(str(e), "max_tokens" if "max_tokens=" in str(e) else where) from None
