"""`python -m engine bench spec`: speculative decoding against plain decoding, as JSON.

For each batch size (--batch 1,8) and prompt kind, the same greedy request (B copies of it) runs plain
and with each proposer, every setting --repeat times round robin after one untimed warm-up, under
speculation's default rule (spec_decode/rule.py); the median run of each is reported:

    code        adding type hints to a function it is given: the answer copies the prompt
    quoting     repeating a paragraph it is given
    repetition  a list with a pattern (counting)
    prose       an open story: nothing to copy, little to guess

Reported per setting: tokens/s (median, and every run), the speed-up over plain's median, acceptance
(per judged draft, the closed form's a; and kept / proposed, vLLM's), tokens per target pass, mean
step time and the proposer's share, how many steps replayed a CUDA graph, the rule's counts, and the
agreement with plain decoding: the share of tokens equal at the same position and the first position
that differs (in bf16 a (k + 1)-row pass need not round like a 1-row one: see docs/ARCHITECTURE.md).

`oracle a=… k=…` drafts the plain run's own answer, each token spoiled with probability 1 - a: drafting
costs nothing and acceptance is known, so it measures what verifying k + 1 tokens costs, against the
closed form (1 - a^(k+1)) / (1 - a). `verify_cost` times a whole runner step on made-up records at a
fixed context, plain decode against verify with k drafts, on the batch ladder: the ratio r that
sets the rule's thresholds (a verify pass pays when (1 - a^(k+1)) / (1 - a) > r).

With random weights (the GPU run: the real weights do not travel) the text is noise: a random model
often loops, which n-gram lookup then predicts, so acceptance says little about real prompts; step
costs, the oracle rows and verify_cost are what such a run measures. `--small` is the CPU smoke version.
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
from ..core.records import ScheduledRequest, SchedulerOutput
from ..llm_engine import LLMEngine
from ..sampling_params import SamplingParams
from ..spec_decode.proposer import Draft
from ..spec_decode.rule import PROBE_DRAFTS, VERIFY_COST, SpeculationRule, break_even
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


def run_on(engine: LLMEngine, tag: str, prompt_ids: list[int], batch: int, max_tokens: int
           ) -> tuple[dict, list[list[int]]]:
    """One timed run of `batch` copies of the prompt on an engine that lives across runs (its graphs
    are captured once): the step records, statistics and rule counts of this run alone."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    on_gpu = engine.device.type == "cuda"
    spec = engine.runner.speculator
    before = dict(spec.rule.to_dict()) if spec is not None else {}
    first_step = engine._step
    if on_gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(batch):
        engine.add_request(f"{tag}/{i}", prompt_ids, params)
    while engine.has_unfinished():
        engine.step()
    if on_gpu:
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    done = [engine.take_output(f"{tag}/{i}") for i in range(batch)]
    outputs = [o.outputs[0].token_ids for o in done]
    s = SpecDecodeStats()
    for o in done:
        if o.metrics is not None and o.metrics.spec is not None:
            s.merge(o.metrics.spec)
    steps = [r for r in engine.trace.since(first_step) if r.num_decode_tokens or r.num_verify_tokens]
    tokens = sum(len(o) for o in outputs)
    result = {
        "tokens": tokens, "steps": len(engine.trace.since(first_step)), "wall_s": round(wall, 4),
        "tokens_per_s": round(tokens / wall, 2),
        "decode_step_ms": round(1000 * statistics.mean(r.wall_s for r in steps), 3) if steps else None,
        "propose_ms_per_step": round(1000 * statistics.mean(r.propose_s for r in steps), 3) if steps else None,
        "graph_steps": sum(1 for r in steps if r.cuda_graph_batch), "decode_steps": len(steps),
        "per_draft_acceptance": _round(s.per_draft_acceptance), "acceptance_rate": _round(s.acceptance_rate),
        "tokens_per_pass": _round(s.tokens_per_pass), "tokens_per_verify_pass": _round(s.tokens_per_verify_pass),
        "accepted_histogram": s.accepted_histogram,
        "all_blocks_free_at_end": engine.num_free_blocks() == engine.block_manager.num_blocks,
    }
    if spec is not None and engine.config.speculative_config is not None:
        after = spec.rule.to_dict()
        result["rule"] = {k: after[k] - before[k] for k in ("steps_off_by_batch", "pauses")}
    return result, outputs


def run_once(model, cfg: EngineConfig, prompt_ids: list[int], batch: int, max_tokens: int,
             draft_model=None, proposer=None) -> tuple[dict, list[list[int]]]:
    """One run on a fresh engine (its graphs captured first, untimed)."""
    return run_on(LLMEngine(model, cfg, draft_model=draft_model, proposer=proposer), "r", prompt_ids, batch,
                  max_tokens)


def agreement(outputs: list[list[int]], plain: list[list[int]]) -> tuple[float, int | None]:
    """(share of tokens equal to plain decoding's at the same position, first position that differs)."""
    same = total = 0
    first = None
    for got, want in zip(outputs, plain):
        n = max(len(got), len(want))
        total += n
        for i in range(n):
            if i < len(got) and i < len(want) and got[i] == want[i]:
                same += 1
            elif first is None or i < first:
                first = i
                break
        else:
            continue
        same += sum(1 for g, w in zip(got[first + 1:], want[first + 1:]) if g == w)
    return (round(same / total, 4) if total else 1.0), first


def median_row(rows: list[dict]) -> dict:
    """The run with the median tokens/s (the lower middle of an even count), with every run's tokens/s."""
    ordered = sorted(rows, key=lambda r: r["tokens_per_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["runs_tokens_per_s"] = [r["tokens_per_s"] for r in rows]
    return row


def verify_cost(model, base: dict, k: int, batches: list[int], context: int, reps: int) -> dict:
    """Median milliseconds of a whole runner step (inputs, forward, sampling, the read back) on made-up
    records at `context` tokens: B one-token decodes, then B verify rows of k drafts, on one engine."""
    cfg = EngineConfig(**dict(base, max_num_seqs=max(batches), num_kv_blocks=-(-(context + k + 1) // 16) + 2),
                       speculative_config={"method": "ngram", "num_speculative_tokens": k})
    engine = LLMEngine(model, cfg)
    runner, greedy = engine.runner, SamplingParams(temperature=0.0)
    blocks = list(range(cfg.num_kv_blocks - 1))          # every row reads the same blocks: a timing, not an answer
    rows = []
    for b in batches:
        def step(drafts: int) -> float:
            reqs = [ScheduledRequest(i, str(i), "verify" if drafts else "decode", [7], context, blocks, sample=True,
                                     sampling_params=greedy, draft_token_ids=[7] * drafts, num_lookahead_tokens=drafts)
                    for i in range(b)]
            t = time.perf_counter()
            runner.execute(SchedulerOutput(scheduled=reqs))
            return 1000 * (time.perf_counter() - t)
        times = {}
        for drafts in (0, k):
            for _ in range(3):
                step(drafts)                                   # warm-up
            times[drafts] = statistics.median(step(drafts) for _ in range(reps))
        ratio = times[k] / times[0]
        rows.append({"batch": b, "decode_ms": round(times[0], 3), "verify_ms": round(times[k], 3),
                     "ratio": round(ratio, 3), "break_even_acceptance": _break_even(ratio, k),
                     "graphs": runner.graphs is not None and runner.verify_graphs is not None})
    return {"k": k, "context": context, "reps": reps, "rows": rows}


def _break_even(ratio: float, k: int) -> float | None:
    """The per-draft acceptance a at which (1 - a^(k+1)) / (1 - a) equals the verify step's cost ratio."""
    if ratio <= 1.0:
        return 0.0
    if ratio >= k + 1:
        return None                                   # not even all k kept pays for the pass
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_per_pass(mid, k) < ratio else (lo, mid)
    return round(hi, 3)


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
    p.add_argument("--batch", default="1,8", help="batch sizes: copies of each prompt decoded together")
    p.add_argument("--repeat", type=int, default=3, help="runs of each setting, round robin; the median is reported")
    p.add_argument("--kinds", default=",".join(PROMPTS), help="prompt kinds, comma-separated")
    p.add_argument("--k", default="2,4", help="num_speculative_tokens values")
    p.add_argument("--early-exit-layers", default="8,15", help="early_exit num_layers values ('' for none)")
    p.add_argument("--draft-model", default=None, help="draft_model: a path, or 'self' (the target drafts for itself)")
    p.add_argument("--oracle", default="1.0", help="acceptance rates for the oracle proposer ('' for none)")
    p.add_argument("--oracle-k", default="4", help="k values for the oracle")
    p.add_argument("--cost-batches", default="1,2,4,8,16,32,64", help="batch sizes verify_cost times ('' for none)")
    p.add_argument("--cost-context", type=int, default=512, help="context tokens of verify_cost's records")
    p.add_argument("--commit", default=None, help="the commit to record (where the tree has no .git)")
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
    rates = [float(x) for x in a.oracle.split(",") if x]
    oracle_ks = [int(k) for k in a.oracle_k.split(",") if k]
    batches = [int(b) for b in a.batch.split(",") if b]
    kinds = [k for k in a.kinds.split(",") if k]
    prompts = {kind: _encode(tokenizer, PROMPTS[kind], model.config.vocab_size) for kind in kinds}

    def base_for(batch: int) -> dict:
        return dict(block_size=16, num_kv_blocks=max(64, batch * (-(-(512 + max_tokens) // 16) + 2)),
                    max_num_seqs=max(8, batch), max_num_batched_tokens=2048)

    results = {}
    progress = (lambda msg: print(f"[bench spec] {msg}", file=sys.stderr, flush=True))
    for batch in batches:
        base = base_for(batch)
        # One engine per setting, alive across every prompt and run: graphs are captured once each.
        engines = {"plain": LLMEngine(model, EngineConfig(**base))}
        answers = {}
        for kind, ids in prompts.items():        # plain decoding's own answers, for the oracle to draft
            answers[tuple(ids)] = run_on(engines["plain"], f"answer-{kind}", ids, batch, max_tokens)[1][0]
        for name, spec in configs:
            engines[name] = LLMEngine(model, EngineConfig(**base, speculative_config=spec),
                                      draft_model=draft if spec["method"] == "draft_model" else None)
        for r in rates:
            for k in oracle_ks:
                engines[f"oracle a={r} k={k}"] = LLMEngine(
                    model, EngineConfig(**base, speculative_config={"method": "ngram", "num_speculative_tokens": k}),
                    proposer=OracleProposer(answers, r, model.config.vocab_size))
        progress(f"batch {batch}: {len(engines)} engines ready")
        by_kind = {}
        for kind, ids in prompts.items():
            runs: dict[str, list[dict]] = {}
            outputs: dict[str, list[list[int]]] = {}
            for name, engine in engines.items():  # untimed: the first run of a prompt fills its prefix cache
                run_on(engine, f"warm-{kind}", ids, batch, max_tokens)
            for rep in range(a.repeat):          # round robin: load and clocks drift, every setting sees it
                for name, engine in engines.items():
                    row, outs = run_on(engine, f"{kind}-{rep}", ids, batch, max_tokens)
                    runs.setdefault(name, []).append(row)
                    outputs.setdefault(name, outs)
            rows = {name: median_row(rs) for name, rs in runs.items()}
            for name, row in rows.items():
                if name == "plain":
                    continue
                row["speedup"] = round(row["tokens_per_s"] / rows["plain"]["tokens_per_s"], 3)
                row["agreement_with_plain"], row["first_divergence"] = agreement(outputs[name], outputs["plain"])
                row["identical_to_plain"] = row["first_divergence"] is None
                if name.startswith("oracle"):
                    rate, k = float(name.split()[1][2:]), int(name.split()[2][2:])
                    row["closed_form_tokens_per_pass"] = round(expected_tokens_per_pass(rate, k), 3)
            by_kind[kind] = rows
            progress(f"batch {batch} {kind}: " + ", ".join(f"{n} {r.get('speedup', r['tokens_per_s'])}"
                                                          for n, r in rows.items()))
        results[f"b={batch}"] = by_kind
        del engines
    cost_batches = [b for b in (int(x) for x in a.cost_batches.split(",") if x)]
    cost = verify_cost(model, base_for(max(batches)), max(ks), cost_batches, a.cost_context, 30) if cost_batches else None
    if cost:
        progress("verify_cost: " + json.dumps(cost["rows"]))
    from ..config import SpeculativeConfig
    default = SpeculativeConfig(method="ngram", num_speculative_tokens=max(ks))
    report = {
        "benchmark": "spec", "measured_on": describe_device(device), "model": model.config.name,
        "shape": _shape(model), "weights": weights, "dtype": str(model.embed.weight.dtype).removeprefix("torch."),
        "batches": batches, "max_tokens": max_tokens, "repeat": a.repeat, "greedy": True,
        "rule": {"disable_by_batch_size": default.disable_by_batch_size, "min_acceptance": default.min_acceptance,
                 "probe_drafts": SpeculationRule().probe_drafts, "pause_tokens": SpeculationRule().pause_tokens,
                 "pause_doubles": True, "probation_drafts": PROBE_DRAFTS, "verify_cost_assumed": VERIFY_COST,
                 # early exit's bar: its draft passes cost L/N steps each (break_even in spec_decode/rule.py)
                 "early_exit_threshold": {
                     str(L): max(default.min_acceptance, break_even(max(ks), L / model.config.num_layers))
                     for L in layers} if layers else None},
        "results": results, "rows": _flat_rows(results), "verify_cost": cost, "goals": _goals(results, cost),
        "notes": _notes(weights),
    }
    print(json.dumps(report, indent=1))
    if a.record:
        from .recorded import save_recorded
        command = "python -m engine bench spec " + " ".join(argv if argv is not None else sys.argv[1:])
        command = " ".join(part for part in command.split() if not part.startswith("--commit") and part != a.commit)
        print(save_recorded("spec", describe_device(device).removeprefix("cuda: "), command.strip(), report,
                            commit=a.commit, model={"name": model.config.name, "weights": weights,
                                                    "dtype": report["dtype"], "shape": report["shape"]}),
              file=sys.stderr)
    return report


def slug(name: str) -> str:
    """A setting's name as a chapter's figure path can name it: 'oracle a=1.0 k=4' -> 'oracle_a10_k4'."""
    return name.replace(" ", "_").replace("=", "").replace(".", "")


def _flat_rows(results: dict) -> list[dict]:
    """One row per (batch, kind, setting) with the figures a chapter cites, keyed by plain words
    (app/recorded_figures.py picks `rows[batch=1,kind=code,setting=ngram_k4].speedup`)."""
    keep = ("tokens_per_s", "speedup", "per_draft_acceptance", "tokens_per_verify_pass", "decode_step_ms",
            "propose_ms_per_step", "agreement_with_plain", "first_divergence")
    return [{"batch": int(b[2:]), "kind": kind, "setting": slug(name), **{k: row.get(k) for k in keep if k in row}}
            for b, kinds in results.items() for kind, rows in kinds.items() for name, row in rows.items()]


def _shape(model) -> dict:
    c = model.config
    return {"layers": c.num_layers, "hidden": c.hidden_size, "heads": c.num_heads, "kv_heads": c.num_kv_heads,
            "head_dim": c.head_dim, "vocab": c.vocab_size,
            "parameters": sum(p.numel() for p in model.parameters())}


def _goals(results: dict, cost: dict | None) -> dict:
    """The issue's goals, read off this run (None where the run lacks the setting)."""
    def speedup(batch, kind, name):
        return results.get(f"b={batch}", {}).get(kind, {}).get(name, {}).get("speedup")
    goals = {"ngram_k4_b1": {kind: speedup(1, kind, "ngram k=4") for kind in ("code", "quoting", "repetition")},
             "oracle_a1_k4": {f"b={b}": {kind: speedup(b, kind, "oracle a=1.0 k=4") for kind in rows}
                              for b, rows in ((k[2:], v) for k, v in results.items())}}
    worst = {}
    for b, kinds in results.items():
        for kind, rows in kinds.items():
            for name, row in rows.items():
                if name != "plain" and not name.startswith("oracle") and "speedup" in row:
                    if b not in worst or row["speedup"] < worst[b][0]:
                        worst[b] = (row["speedup"], f"{kind} {name}")
    goals["slowest_default_rule_setting"] = {b: {"speedup": s, "setting": n} for b, (s, n) in worst.items()}
    if cost:
        one = next((r for r in cost["rows"] if r["batch"] == 1), None)
        goals["verify_over_decode_step_b1"] = one["ratio"] if one else None
    return goals


def _notes(weights: str) -> list[str]:
    notes = ["speedup = median tokens/s with the proposer / median tokens/s plain, same prompt, same settings",
             "per_draft_acceptance = kept / (kept + rejections): the a of (1 - a^(k+1)) / (1 - a); "
             "acceptance_rate = kept / proposed (vLLM's)",
             "agreement_with_plain: tokens equal to plain decoding's at the same position; first_divergence: "
             "the first position that differs (None: identical)",
             "oracle: drafts the plain answer, each token spoiled with probability 1 - a; drafting costs ~0, "
             "so its speedup is the most any proposer with that acceptance could get here",
             "verify_cost: a whole runner step on made-up records (ratio = verify / decode); "
             "break_even_acceptance: the a at which (1 - a^(k+1)) / (1 - a) = ratio"]
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
