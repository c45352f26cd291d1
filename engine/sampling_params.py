"""SamplingParams: how one request turns logits into tokens, and when it stops, in vLLM's names and defaults.

A vLLM user's `SamplingParams(temperature=0.8, top_p=0.95)` means the same here. What a step does with
them, in order (engine/model/sampler.py):

    raw logits ─► logit_bias, min_tokens (EOS and stop_token_ids banned) ─► repetition / frequency /
    presence penalties ─► greedy argmax, or temperature ─► top-k ─► min-p ─► top-p ─► draw

logprobs and prompt_logprobs are read from the raw logits, before any of that (vLLM's default too).
vLLM parameters this engine does not implement are refused by name (NOT_SUPPORTED below), never ignored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral, Real

MAX_LOGPROBS = 20     # top-k log-probabilities a position may return (vLLM's default max_logprobs)


@dataclass(slots=True)
class SamplingParams:
    n: int = 1                          # completions of one prompt (they share its KV blocks)
    presence_penalty: float = 0.0       # subtracted once from every token already generated (-2 to 2)
    frequency_penalty: float = 0.0      # subtracted per occurrence in the generated text so far (-2 to 2)
    repetition_penalty: float = 1.0     # > 1 discourages tokens of the prompt or output: a positive logit is
    #                                     divided by it, a negative one multiplied (1 = off)
    temperature: float = 1.0            # 0 means greedy (argmax)
    top_p: float = 1.0                  # keep the most likely tokens up to this much mass (1 = off)
    top_k: int = 0                      # keep the k most likely (0 or -1 = off)
    min_p: float = 0.0                  # drop tokens below min_p x the top probability (0 = off)
    seed: int | None = None             # this request's own generator: the same seed gives the same tokens
    stop: list[str] = field(default_factory=list)           # strings that end the text (not included in it)
    stop_token_ids: list[int] = field(default_factory=list) # tokens that end it (kept in token_ids)
    ignore_eos: bool = False            # keep going past the end-of-sequence token
    max_tokens: int | None = 16         # tokens per completion; None = as many as the context leaves
    min_tokens: int = 0                 # EOS and stop_token_ids are impossible before this many tokens
    logprobs: int | None = None         # per generated token: the chosen token's log-probability and the top k
    prompt_logprobs: int | None = None  # the same for every prompt token after the first
    logit_bias: dict[int, float] | None = None   # token id -> added to its logit before sampling
    num_speculative_tokens: int | None = None    # speculative engines: at most this many drafts a step for
    #                                             this request (None = the engine's k, 0 = never speculate)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):            # vLLM's reading: one string is a list of one
            self.stop = [self.stop]
        if self.stop is None:
            self.stop = []
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        self.check()

    def check(self) -> None:
        """Refuse what cannot be honoured, naming the field. Run at construction and again when a request
        is submitted (a script may have set a field afterwards, as vLLM's generate.py example does)."""
        _integer("n", self.n, low=1)
        for name, low, high in (("presence_penalty", -2.0, 2.0), ("frequency_penalty", -2.0, 2.0)):
            _real(name, getattr(self, name), low, high)
        _real("repetition_penalty", self.repetition_penalty, 0.0, None, open_low=True)
        _real("temperature", self.temperature, 0.0, None)
        _real("top_p", self.top_p, 0.0, 1.0, open_low=True)
        _integer("top_k", self.top_k, low=-1)
        _real("min_p", self.min_p, 0.0, 1.0)
        if self.seed is not None:
            _integer("seed", self.seed)
        if self.max_tokens is not None:
            _integer("max_tokens", self.max_tokens, low=1)
        _integer("min_tokens", self.min_tokens, low=0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"SamplingParams: min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None:
                _integer(name, value, low=0, high=MAX_LOGPROBS,
                         why=f"a count of top tokens from 0 to {MAX_LOGPROBS} (-1, the whole vocabulary, is not supported)")
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"SamplingParams: ignore_eos must be a bool, got {type(self.ignore_eos).__name__}")
        if not isinstance(self.stop, list):
            raise TypeError(f"SamplingParams: stop must be a string or a list of strings, got {type(self.stop).__name__}")
        for i, s in enumerate(self.stop):
            if not isinstance(s, str) or not s:
                raise ValueError(f"SamplingParams: stop[{i}] must be a non-empty string, got {s!r}")
        if not isinstance(self.stop_token_ids, list):
            raise TypeError(f"SamplingParams: stop_token_ids must be a list of token ids, "
                            f"got {type(self.stop_token_ids).__name__}")
        for i, t in enumerate(self.stop_token_ids):
            _integer(f"stop_token_ids[{i}]", t, low=0)
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise TypeError(f"SamplingParams: logit_bias must be a dict of token id -> bias, "
                                f"got {type(self.logit_bias).__name__}")
            for token, bias in self.logit_bias.items():
                _integer("a logit_bias key", token, low=0)
                _real(f"logit_bias[{token}]", bias, -100.0, 100.0)
        if self.num_speculative_tokens is not None:
            _integer("num_speculative_tokens", self.num_speculative_tokens, low=0, why="0 = no drafts")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def adjusts_logits(self) -> bool:
        """Sampling reads more than this step's logits: the output so far (penalties, min_tokens) or a bias.
        Such a request decodes one token a step (no speculation): a verify step's rows would each need the
        history up to their own draft."""
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0
                or bool(self.logit_bias) or self.min_tokens > 0)


def _integer(name: str, value, low: int | None = None, high: int | None = None, why: str = "") -> None:
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise TypeError(f"SamplingParams: {name} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"SamplingParams: {name} must be {why or bounds}, got {value}")


def _real(name: str, value, low: float | None, high: float | None, open_low: bool = False) -> None:
    if not isinstance(value, Real) or isinstance(value, bool):
        raise TypeError(f"SamplingParams: {name} must be a number, got {value!r}")
    if value != value or (low is not None and (value <= low if open_low else value < low)) \
            or (high is not None and value > high):
        lo = "" if low is None else f"{'>' if open_low else '>='} {low}"
        hi = "" if high is None else f"<= {high}"
        raise ValueError(f"SamplingParams: {name} must be {' and '.join(x for x in (lo, hi) if x)}, got {value}")


# vLLM parameters this engine does not implement, each with the value that means "not used". That value is
# accepted (scripts often spell out defaults); any other is refused by name rather than ignored.
NOT_SUPPORTED = {
    "best_of": None,                     # (n is accepted too: best_of == n draws nothing extra)
    "allowed_token_ids": None, "bad_words": None, "logits_processors": None, "structured_outputs": None,
    "guided_decoding": None, "truncate_prompt_tokens": None, "output_kind": None, "extra_args": None,
    "include_stop_str_in_output": False, "skip_special_tokens": True, "spaces_between_special_tokens": True,
    "detokenize": True, "flat_logprobs": False,
}
_dataclass_init = SamplingParams.__init__


def _init_refusing_unsupported(self, *args, **kwargs) -> None:
    for name in sorted(kwargs.keys() & NOT_SUPPORTED.keys()):
        value = kwargs.pop(name)
        if value != NOT_SUPPORTED[name] and not (name == "best_of" and value == kwargs.get("n", 1)):
            raise ValueError(f"SamplingParams: {name}={value!r} is not supported by this engine "
                             f"(only its default, {NOT_SUPPORTED[name]!r})")
    _dataclass_init(self, *args, **kwargs)


SamplingParams.__init__ = _init_refusing_unsupported
