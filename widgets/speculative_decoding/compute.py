"""The engine mode's work, without Panel: one request in a private speculative engine, one step at a time.

    stepper = SpecStepper(llm, "Repeat this sentence twice: ...", method="ngram", k=4)
    view = stepper.step()          # the prefill, then one verify step per call
    view.tokens                    # [TokenView(text, status, p, q), ...]: drafts with their verdicts,
                                   # then the bonus or correction token
    stepper.stats                  # the engine's own SpecDecodeStats for this request

Everything shown is read back from the engine: the step trace's verify entry (the drafts, how many
were kept, p and q) and the engine's statistics. The sandbox shares the loaded weights and nothing
else, so other readers never see this request and it never sees theirs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine import SamplingParams, SpecDecodeStats, expected_tokens_per_pass
from widgets.common.sandboxes import release, sandbox

METHODS = {
    "ngram": "n-gram lookup (copies from the text so far)",
    "early_exit": "early exit (the target's first L layers)",
    "draft_model": "draft model (SmolLM2 drafting for itself)",
}
MAX_K, MAX_TOKENS, MAX_PROMPT_TOKENS = 8, 96, 384
SEED = 0                       # sampled runs are seeded: the same settings replay the same steps


@dataclass(slots=True)
class TokenView:
    token_id: int
    text: str
    status: str                # accepted | rejected | unjudged | bonus | correction | sampled | first | dropped
    p: float | None = None     # the target's sampling probability of this token at its position
    q: float | None = None     # the draft's (None: greedy, or a point mass)


@dataclass(slots=True)
class StepView:
    step: int                  # 0 = the prefill
    kind: str                  # prefill | verify | decode (a step that found nothing to draft)
    tokens: list[TokenView] = field(default_factory=list)
    num_drafts: int = 0
    num_accepted: int = 0
    step_ms: float = 0.0
    propose_ms: float = 0.0
    prompt_tokens: int = 0

    @property
    def emitted(self) -> int:
        return sum(t.status in ("accepted", "bonus", "correction", "sampled", "first") for t in self.tokens)


def spec_config(llm, method: str, k: int, num_layers: int) -> dict:
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    if method == "early_exit":
        return {"method": "early_exit", "num_speculative_tokens": k, "num_layers": num_layers}
    if method == "draft_model":
        if llm.source is None:
            raise ValueError("no draft model here: this engine has random weights")
        return {"method": "draft_model", "num_speculative_tokens": k, "model": str(llm.source)}
    raise ValueError(f"unknown method {method!r}")


class SpecStepper:
    def __init__(self, llm, prompt: str, method: str = "ngram", k: int = 4, num_layers: int = 15,
                 temperature: float = 0.0, max_tokens: int = 64, chat: bool = True):
        self.llm, self.method, self.k = llm, method, k
        ids = llm.tokenizer.encode_ids(llm.format_prompt(prompt, chat))[-MAX_PROMPT_TOKENS:]
        blocks = -(-(len(ids) + max_tokens + MAX_K + 2) // 16) + 2
        self.engine = sandbox(llm, num_kv_blocks=blocks, max_num_seqs=1,   # owned by the reader's page
                              speculative_config=spec_config(llm, method, k, num_layers))
        self.params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=False,
                                     seed=SEED if temperature > 0 else None)
        self.engine.add_request("r", ids, self.params)
        self.prompt_tokens, self.views, self.output_ids = len(ids), [], []

    @property
    def done(self) -> bool:
        return not self.engine.has_unfinished()

    @property
    def stats(self) -> SpecDecodeStats:
        return self.engine.spec_stats

    def step(self) -> StepView | None:
        """One engine step (the prefill, or a verify pass); None once the reply has ended."""
        while not self.done:
            start = time.perf_counter()
            events = self.engine.step()
            took = time.perf_counter() - start
            record = self.engine.trace.records[-1]
            entry = next((e for e in record.entries if e.request_id == "r"), None)
            new = [ev.token_id for ev in events if ev.request_id == "r"]
            self.output_ids += new
            if entry is None or (entry.kind == "prefill" and not new):
                continue                                  # a middle prefill chunk: nothing to show yet
            view = self._view(len(self.views), entry, new, 1000 * took, 1000 * record.propose_s)
            self.views.append(view)
            return view
        return None

    def _view(self, number: int, entry, new: list[int], step_ms: float, propose_ms: float) -> StepView:
        text = self._text
        if entry.kind == "prefill":
            return StepView(number, "prefill", [TokenView(t, text(t), "first") for t in new], step_ms=step_ms,
                            propose_ms=propose_ms, prompt_tokens=self.prompt_tokens)
        v = entry.verified
        if v is None:                                     # no draft this step: a plain decode
            return StepView(number, "decode", [TokenView(t, text(t), "sampled") for t in new], step_ms=step_ms,
                            propose_ms=propose_ms)
        tokens = []
        for j, d in enumerate(v.draft_token_ids):
            status = "accepted" if j < v.num_accepted else "rejected" if j == v.num_accepted else "unjudged"
            if status == "accepted" and j >= len(new):
                status = "dropped"                        # kept by the verifier, but after the reply's end
            p = v.target_probs[j] if v.target_probs is not None and status != "unjudged" else None
            q = v.draft_probs[j] if v.draft_probs is not None else None
            tokens.append(TokenView(d, text(d), status, p, q))
        final = "bonus" if v.bonus else "correction"
        tokens.append(TokenView(v.final_token_id, text(v.final_token_id),
                                final if len(new) > v.num_accepted else "dropped", v.final_prob))
        return StepView(number, "verify", tokens, v.num_drafts, v.num_accepted, step_ms, propose_ms)

    def _text(self, token_id: int) -> str:
        return self.llm.tokenizer.decode([token_id])

    def summary(self) -> dict:
        """The running numbers beside the closed form: a is the engine's kept / judged."""
        s = self.stats
        a = s.per_draft_acceptance
        verify = [v for v in self.views if v.kind == "verify"]
        return {
            "passes": s.num_passes, "tokens": s.num_tokens, "drafts": s.num_drafts, "accepted": s.num_accepted,
            "verify_passes": s.num_verify_passes, "a": a, "acceptance_rate": s.acceptance_rate,
            "tokens_per_pass": s.tokens_per_pass, "tokens_per_verify_pass": s.tokens_per_verify_pass,
            "closed_form": expected_tokens_per_pass(a, self.k) if a is not None else None,
            "k": self.k, "histogram": list(s.accepted_histogram),
            "verify_ms": sum(v.step_ms for v in verify) / len(verify) if verify else None,
            "propose_ms": sum(v.propose_ms for v in verify) / len(verify) if verify else None,
            "rule": self._rule(),
        }

    def _rule(self) -> dict | None:
        """When the engine drafts at all (spec_decode/rule.py): its thresholds and what they did here."""
        spec = getattr(getattr(self.engine, "runner", None), "speculator", None)
        return None if spec is None else spec.rule.to_dict()

    def close(self) -> None:
        """Abort the request and release the sandbox's KV memory now (a block left in use is logged)."""
        release(self.engine, "speculative-decoding")


def run_all(llm, prompt: str, max_tokens: int, **settings) -> tuple[list[StepView], dict]:
    """Every step of one reply, in a private engine released at the end (the saved example, the benchmark)."""
    stepper = SpecStepper(llm, prompt, max_tokens=max_tokens, **settings)
    try:
        views = list(iter(stepper.step, None))
        return views, stepper.summary()
    finally:
        stepper.close()
