"""`python -m engine bench spec`: speculative decoding against plain decoding, as JSON.

For each prompt kind, the same greedy request runs plain and with each proposer (same engine
settings, one request at a time unless --batch says otherwise), after one untimed warm-up run:

    code        adding type hints to a function it is given: the answer copies the prompt
    quoting     repeating a paragraph it is given
    repetition  a list with a pattern (counting)
    prose       an open story: nothing to copy, little to guess

Reported per run: acceptance (per judged draft, the closed form's a; and kept / proposed, vLLM's),
tokens per target pass, mean step time and the proposer's share of it, wall-clock tokens per second
and the speed-up over plain, and whether the tokens equal plain decoding's.

`oracle` runs a proposer that knows the plain run's answer and spoils each guess with probability
1 - a: drafting costs nothing and acceptance is known, so it measures what verifying k + 1 tokens
costs on this device, against the closed form (1 - a^(k+1)) / (1 - a). With random weights (the GPU
run) only this part and the step costs mean anything: a random model's text is noise, so acceptance
is meaningless there, except n-gram lookup on a model that loops.

`--small` is the CPU smoke version (a tiny random model, few tokens) for the tests.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch

from ..config import EngineConfig
from ..llm_engine import LLMEngine
from ..sampling_params import SamplingParams
from ..spec_decode.proposer import Draft
from ..spec_decode.stats import SpecDecodeStats, expected_tokens_per_pass
from .serve_sim import describe_device, load_model

PROMPTS = {
    "code": "Add type hints to this function and return the whole function, nothing else:\n\n"
            "def moving_average(values, window):\n    result = []\n    total = 0.0\n"
            "    for i, value in enumerate(values):\n        total += value\n        if i >= window:\n"
            "            total -= values[i - window]\n        if i >= window - 1:\n"
            "            result.append(total / window)\n    return result\n",
    "quoting": "Repeat this paragraph exactly, word for word:\n\nThe old lighthouse stood on the cliff for two "
               "hundred years. Every night its keeper climbed the stairs, lit the lamp and watched the ships "
               "pass safely through the narrow strait below.",
    "repetition": "Count from 1 to 60, separated by commas.",
    "prose": "Write a short story about a fox who learns to play the violin.",
}


class OracleProposer:
    """Drafts the known answer, each token spoiled (id + 1) with probability 1 - a, independently."""
    method = "oracle"

    def __init__(self, answers: dict[tuple, list[int]], a: float, vocab: int, seed: int = 0):
        self.answers, self.a, self.vocab, self.rng = answers, a, vocab, random.Random(seed)

    def propose(self, requests, step):
        drafts = []
        for r in requests:
            ctx = r.context_token_ids
            prompt = next(p for p in self.answers if tuple(ctx[:len(p)]) == p)
            truth = self.answers[prompt][len(ctx) - len(prompt):][:r.max_drafts]
            drafts.append(Draft([t if self.rng.random() < self.a else (t + 1) % self.vocab for t in truth]))
        return drafts

    def forget(self, seq_ids):
        pass


def run_once(model, cfg: EngineConfig, prompt_ids: list[int], batch: int, max_tokens: int,
             draft_model=None, proposer=None) -> tuple[dict, list[int]]:
    engine = LLMEngine(model, cfg, draft_model=draft_model, proposer=proposer)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    sync = torch.cuda.synchronize if model.embed.weight.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    for i in range(batch):
        engine.add_request(str(i), prompt_ids, params)
    while engine.has_unfinished():
        engine.step()
    sync()
    wall = time.perf_counter() - start
    outputs = [engine.take_output(str(i)).outputs[0].token_ids for i in range(batch)]
    steps = [r for r in engine.trace if r.num_decode_tokens or r.num_verify_tokens]
    s: SpecDecodeStats = engine.spec_stats
    tokens = sum(len(o) for o in outputs)
    result = {
        "tokens": tokens, "steps": engine.trace.num_steps, "wall_s": round(wall, 4),
        "tokens_per_s": round(tokens / wall, 2),
        "decode_step_ms": round(1000 * statistics.mean(r.wall_s for r in steps), 3) if steps else None,
        "propose_ms_per_step": round(1000 * statistics.mean(r.propose_s for r in steps), 3) if steps else None,
        "per_draft_acceptance": _round(s.per_draft_acceptance), "acceptance_rate": _round(s.acceptance_rate),
        "tokens_per_pass": _round(s.tokens_per_pass), "tokens_per_verify_pass": _round(s.tokens_per_verify_pass),
        "accepted_histogram": s.accepted_histogram,
        "all_blocks_free_at_end": engine.num_free_blocks() == engine.block_manager.num_blocks,
    }
    return result, outputs[0]


def _round(x, digits: int = 3):
    return None if x is None else round(x, digits)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m engine bench spec", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="tiny | smollm2-random | default | PATH (default: tiny with --small, else default)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads on CPU")
    p.add_argument("--small", action="store_true", help="CPU smoke run: tiny random model, 16 tokens")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per request (default 96; 16 with --small)")
    p.add_argument("--batch", type=int, default=1, help="copies of each prompt decoded together")
    p.add_argument("--repeat", type=int, default=1, help="runs of each setting, round robin; the fastest is kept")
    p.add_argument("--kinds", default=",".join(PROMPTS), help="prompt kinds, comma-separated")
    p.add_argument("--k", default="2,4", help="num_speculative_tokens values")
    p.add_argument("--early-exit-layers", default="8,15", help="early_exit num_layers values ('' for none)")
    p.add_argument("--draft-model", default=None, help="draft_model: a path, or 'self' (the target drafts for itself)")
    p.add_argument("--oracle", default="1.0,0.8,0.6", help="acceptance rates for the oracle proposer ('' for none)")
    p.add_argument("--record", action="store_true", help="save the JSON as engine/bench/data/spec.json")
    return p.parse_args(argv)


def run(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    model_name = a.model or ("tiny" if a.small else "default")
    if a.threads:
        torch.set_num_threads(a.threads)
    elif model_name == "tiny":
        torch.set_num_threads(1)
    max_tokens = a.max_tokens or (16 if a.small else 96)
    model, tokenizer, weights = _load(model_name, a.device, a.dtype)
    device = model.embed.weight.device
    ks = [int(k) for k in a.k.split(",") if k]
    layers = [int(n) for n in a.early_exit_layers.split(",") if n and int(n) < model.config.num_layers]
    if a.small:
        layers = [1]
    configs = [(f"ngram k={k}", {"method": "ngram", "num_speculative_tokens": k}) for k in ks]
    configs += [(f"early_exit L={n} k={k}", {"method": "early_exit", "num_speculative_tokens": k, "num_layers": n})
                for n in layers for k in ks]
    draft = None
    if a.draft_model:
        draft = model if a.draft_model == "self" else _load(a.draft_model, a.device, a.dtype)[0]
        configs += [(f"draft_model={a.draft_model} k={k}", {"method": "draft_model", "num_speculative_tokens": k,
                                                             "model": a.draft_model}) for k in ks]
    base = dict(block_size=16, num_kv_blocks=max(64, a.batch * (-(-(512 + max_tokens) // 16) + 2)),
                max_num_seqs=max(8, a.batch), max_num_batched_tokens=2048)
    kinds = [k for k in a.kinds.split(",") if k]
    prompts = {kind: _encode(tokenizer, PROMPTS[kind], model.config.vocab_size) for kind in kinds}
    run_once(model, EngineConfig(**base), prompts[kinds[0]], a.batch, max_tokens)       # warm-up, untimed
    results = {}
    for kind, ids in prompts.items():
        rows, outputs = {}, {}
        for _ in range(a.repeat):          # round robin, the fastest run of each kept: load comes and goes
            for name, spec in [("plain", None)] + configs:
                row, tokens = run_once(model, EngineConfig(**base, speculative_config=spec), ids, a.batch,
                                       max_tokens, draft_model=draft if spec and spec["method"] == "draft_model" else None)
                if name not in rows or row["wall_s"] < rows[name]["wall_s"]:
                    rows[name], outputs[name] = row, tokens
        for name, row in rows.items():
            if name != "plain":
                row["speedup"] = round(row["tokens_per_s"] / rows["plain"]["tokens_per_s"], 3)
                row["identical_to_plain"] = outputs[name] == outputs["plain"]
        results[kind] = rows
    oracle = {}
    rates = [float(x) for x in a.oracle.split(",") if x]
    if rates:
        ids = prompts[kinds[-1]]
        plain, answer = run_once(model, EngineConfig(**base), ids, a.batch, max_tokens)
        oracle["plain"] = plain
        for rate in rates:
            for k in ks:
                proposer = OracleProposer({tuple(ids): answer}, rate, model.config.vocab_size)
                row, tokens = run_once(model, EngineConfig(**base, speculative_config={"method": "ngram",
                                       "num_speculative_tokens": k}), ids, a.batch, max_tokens, proposer=proposer)
                row["closed_form_tokens_per_pass"] = round(expected_tokens_per_pass(rate, k), 3)
                row["speedup"] = round(row["tokens_per_s"] / plain["tokens_per_s"], 3)
                row["identical_to_plain"] = tokens == answer
                oracle[f"a={rate} k={k}"] = row
    report = {
        "benchmark": "spec", "measured_on": describe_device(device), "model": model.config.name,
        "weights": weights, "dtype": str(model.embed.weight.dtype).removeprefix("torch."),
        "batch": a.batch, "max_tokens": max_tokens, "repeat": a.repeat, "greedy": True, "results": results,
        "oracle": oracle,
        "notes": _notes(weights),
    }
    print(json.dumps(report, indent=1))
    if a.record:
        from .recorded import save_recorded
        command = "python -m engine bench spec " + " ".join(argv if argv is not None else sys.argv[1:])
        print(save_recorded("spec", describe_device(device).removeprefix("cuda: "), command.strip(), report),
              file=sys.stderr)
    return report


def _notes(weights: str) -> list[str]:
    notes = ["speedup = tokens/s with the proposer / tokens/s plain, same prompt, same settings, one warm run each",
             "per_draft_acceptance = kept / (kept + rejections): the a of (1 - a^(k+1)) / (1 - a); "
             "acceptance_rate = kept / proposed (vLLM's)",
             "oracle: drafts the plain answer, each token spoiled with probability 1 - a; drafting costs ~0, "
             "so its speedup is the most any proposer with that acceptance could get here"]
    if weights == "random":
        notes.append("random weights: the text is noise, so acceptance says nothing about real prompts "
                     "(a random model often loops, which n-gram lookup then predicts); step costs and the "
                     "oracle rows are what this run measures")
    return notes


def _load(name: str, device: str, dtype):
    """(model, tokenizer or None, 'real' | 'random'): 'tiny' (small random shapes, for --small),
    'smollm2-random' (SmolLM2's shapes, random values), 'default' (the embedded model) or a path."""
    if name == "tiny":
        return load_model("tiny", device, dtype, 0)[0], None, "random"
    from ..loader import model_loader            # weights (or random ones) the way LLM() loads them
    random_weights = name == "smollm2-random"
    model, tokenizer, *_ = model_loader.load_model(EngineConfig(
        model=None if name in ("default", "smollm2-random") else name, device=device, dtype=dtype,
        random_weights=random_weights))
    return model, None if random_weights else tokenizer, "random" if random_weights else "real"


def _encode(tokenizer, text: str, vocab: int) -> list[int]:
    """The chat-formatted prompt's ids; bytes (folded into the vocabulary) for a random model."""
    if tokenizer is None:
        return [b % vocab for b in text.encode()]
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}])
    return tokenizer.encode_ids(text)


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
