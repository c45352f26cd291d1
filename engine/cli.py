"""`python -m engine ...`: generate text, describe the model, run benchmarks.

    python -m engine generate "What is the capital of France?"     # streams tokens to the terminal
    python -m engine generate --prompt-file essay.txt --raw        # a prompt too long for the command line
    python -m engine generate --tp 3 "Hello"                       # tensor parallel: 3 processes (ch. 19)
    python -m engine generate --pp 2 --stats "Hello"               # pipeline parallel: 2 stages
    python -m engine info                                          # shapes, parameters, KV bytes per token
    python -m engine serve --port 8000 --api-key sk-local          # an OpenAI-compatible API (engine/serve)
    python -m engine generate --speculative-method ngram --num-speculative-tokens 4 "Repeat: ..."
    python -m engine bench kernels | serve-sim | throughput | latency | prefill | parallel | spec [options]   # JSON
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .config import RANDOM_SHAPES

BENCHES = {   # name -> (what it measures, the module whose main(argv) runs it)
    "kernels": ("paged-attention kernels vs the bandwidth limit and SDPA (needs a GPU for real numbers)",
                "kernels.bench.attention"),
    "small-ops": ("RMSNorm, RoPE and SwiGLU: eager PyTorch vs the fused Triton kernels (GPU)",
                  "kernels.bench.small_ops"),
    "serve-sim": ("a synthetic serving workload: continuous vs static batching", "engine.bench.serve_sim"),
    "throughput": ("offline throughput vs Hugging Face generate_batch / generate, and the bandwidth roofline (GPU)",
                   "engine.bench.throughput"),
    "latency": ("TTFT and inter-token latency at batch 1, 8, 64 vs Hugging Face eager and compiled (GPU)",
                "engine.bench.latency"),
    "prefill": ("time to first token vs prompt length 128 ... 16k, beside the computed FLOP and byte floors (GPU)",
                "engine.bench.prefill"),
    "parallel": ("tensor/pipeline parallel sizes against one process: throughput, latency, communication",
                 "engine.bench.parallel"),
    "spec": ("speculative decoding: plain vs n-gram / early-exit / draft-model proposers, per prompt kind",
             "engine.bench.spec"),
}
SPEC_FLAGS = {   # speculative_config field -> its command-line flag
    "method": "--speculative-method", "num_speculative_tokens": "--num-speculative-tokens",
    "prompt_lookup_min": "--prompt-lookup-min", "prompt_lookup_max": "--prompt-lookup-max",
    "num_layers": "--speculative-num-layers", "model": "--speculative-model",
}


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a local Llama GGUF file or Hugging Face folder, or a name: "
                   f"{', '.join(RANDOM_SHAPES)} (those shapes, random values) "
                   "(default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--random-weights", action="store_true", help="the --model's shapes (SmolLM2's without one), "
                   "random values (for speed tests)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="longest prompt + output the engine accepts (default: the model's context, or what the KV cache holds)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="CUDA: share of GPU memory for weights, activations and the KV cache (default 0.9)")
    p.add_argument("--enforce-eager", action="store_true",
                   help="CUDA: run every step eagerly (no CUDA graphs for decode steps)")
    s = p.add_argument_group("speculative decoding (chapter 18)")
    s.add_argument("--speculative-method", choices=["ngram", "early_exit", "draft_model"], default=None,
                   help="who drafts: n-gram prompt lookup, the target's first layers, or a small model")
    s.add_argument("--num-speculative-tokens", type=int, default=None, metavar="K", help="drafts per step (k)")
    s.add_argument("--prompt-lookup-min", type=int, default=None, metavar="N", help="ngram: shortest suffix to match (1)")
    s.add_argument("--prompt-lookup-max", type=int, default=None, metavar="N", help="ngram: longest suffix to match (4)")
    s.add_argument("--speculative-num-layers", type=int, default=None, metavar="L", help="early_exit: layers that draft")
    s.add_argument("--speculative-model", default=None, metavar="PATH", help="draft_model: a GGUF file or HF folder")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="A small LLM inference engine.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text from a prompt, streaming tokens as they come")
    g.add_argument("prompt", nargs="?", help="the prompt (or use --prompt-file)")
    g.add_argument("--prompt-file", metavar="PATH", help="read the prompt from a file ('-' = standard input)")
    g.add_argument("--raw", action="store_true", help="do not apply the chat template")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stats", action="store_true", help="print TTFT, inter-token latency and tokens/s at the end "
                   "(and, split over processes, the communication)")
    g.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor parallel: split every matrix over N processes (SmolLM2: 1, 3 or 9)")
    g.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline parallel: split the layers into N stages")
    g.add_argument("--micro-batches", type=int, default=None, metavar="M",
                   help="with --pp: micro-batches per step (default: one per stage)")
    _model_args(g)

    i = sub.add_parser("info", help="print the model's shapes, parameter count and KV-cache bytes per token")
    i.add_argument("--json", action="store_true")
    _model_args(i)

    s = sub.add_parser("serve", help="serve an OpenAI-compatible API: /v1/models, /v1/completions, /v1/chat/completions")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every one)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free one, printed)")
    s.add_argument("--api-key", default=os.environ.get("ENGINE_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $ENGINE_API_KEY, else no key)")
    s.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the model's own)")
    s.add_argument("--max-concurrent", type=int, default=64, help="requests running at once; more get 429 (default 64)")
    s.add_argument("--max-waiting", type=int, default=64,
                   help="requests waiting in the engine's queue; more get 429 (default 64)")
    s.add_argument("--max-tokens-limit", type=int, default=None,
                   help="the most tokens one completion may ask for (default: what the context leaves)")
    _model_args(s)

    b = sub.add_parser("bench", help="benchmarks that print JSON: " + ", ".join(BENCHES))
    b.add_argument("name", choices=sorted(BENCHES), help="; ".join(f"{k}: {v[0]}" for k, v in BENCHES.items()))
    b.add_argument("rest", nargs=argparse.REMAINDER, help="options passed to the benchmark (see its --help)")
    return parser


def read_prompt(args) -> str:
    """The prompt argument, or the contents of --prompt-file (standard input for '-')."""
    if (args.prompt is None) == (args.prompt_file is None):
        raise ValueError("give the prompt either as an argument or with --prompt-file, not both")
    if args.prompt_file is None:
        return args.prompt
    if args.prompt_file == "-":
        return sys.stdin.read()
    try:
        with open(args.prompt_file, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"cannot read --prompt-file {args.prompt_file}: {e.strerror}") from None


def speculative_config(args) -> dict | None:
    """The speculative_config the flags describe (None without --speculative-method), checked here so
    that a mistake names the flag."""
    from .config import SpeculativeConfig
    given = {field: getattr(args, flag[2:].replace("-", "_")) for field, flag in SPEC_FLAGS.items()}
    given = {field: value for field, value in given.items() if value is not None}
    if not given:
        return None
    if "method" not in given:
        raise ValueError(f"{', '.join(SPEC_FLAGS[f] for f in given)} need --speculative-method")
    try:
        SpeculativeConfig.from_dict(given)
    except ValueError as e:
        message = str(e)
        for field, flag in SPEC_FLAGS.items():
            message = message.replace(f"'{field}'", f"{flag} ('{field}')")
        raise ValueError(message) from None
    return given


def make_llm(args):
    from . import LLM
    return LLM(model=args.model, device=args.device, dtype=args.dtype, random_weights=args.random_weights,
               max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
               tensor_parallel_size=getattr(args, "tp", 1), pipeline_parallel_size=getattr(args, "pp", 1),
               micro_batches=getattr(args, "micro_batches", None), enforce_eager=args.enforce_eager,
               speculative_config=speculative_config(args))


def cmd_generate(args) -> int:
    import time

    from . import SamplingParams
    prompt = read_prompt(args)
    if args.tp * args.pp > 1:          # the ranks share this machine's cores: rank 0 takes its share
        import torch
        torch.set_num_threads(max(1, torch.get_num_threads() // (args.tp * args.pp)))
    llm = make_llm(args)
    try:
        params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                                max_tokens=args.max_tokens, seed=args.seed)
        start = time.perf_counter()
        times = []
        for ev in llm.stream(prompt, params, chat=not args.raw):
            times.append(time.perf_counter())
            sys.stdout.write(ev.text_delta)
            sys.stdout.flush()
        sys.stdout.write("\n")
        if args.stats and times:
            gaps = [b - a for a, b in zip(times, times[1:])]
            itl = sum(gaps) / len(gaps) if gaps else 0.0
            print(f"[{len(times)} tokens on {llm.device}: TTFT {times[0] - start:.3f}s, "
                  f"mean ITL {itl * 1000:.1f} ms, {len(times) / (times[-1] - start):.1f} tokens/s]", file=sys.stderr)
            if llm.parallel:
                print(f"[{communication_summary(llm.trace_since(0))}]", file=sys.stderr)
            spec = llm.engine.spec_stats if not llm.parallel else None
            if spec is not None and spec.num_verify_passes:
                print(f"[speculative: {spec.num_drafts} drafts, {spec.num_accepted} kept "
                      f"(a = {spec.per_draft_acceptance:.2f}), {spec.tokens_per_pass:.2f} tokens per target pass]",
                      file=sys.stderr)
    finally:
        llm.close()     # a parallel engine ends its worker processes here
    return 0


def communication_summary(trace) -> str:
    """What crossed between the processes of a parallel run, from its step trace."""
    from .distributed import CommCounts
    steps = [r.parallel for r in trace if r.parallel is not None]
    total = {k: CommCounts() for k in ("all_reduce", "send", "control")}
    for p in steps:
        total["all_reduce"].add(p.all_reduce)
        total["send"].add(p.total("send"))
        total["control"].add(p.total("control"))
    parts = [f"{len(steps)} steps"]
    for kind, label in (("all_reduce", "all-reduces per rank"), ("send", "stage hand-offs"), ("control", "records")):
        c = total[kind]
        if c.calls:
            parts.append(f"{label}: {c.calls:,} calls, {c.bytes / 1e6:.2f} MB, {c.seconds * 1000:.1f} ms")
    bubbles = [p.bubble for p in steps if p.pipeline_parallel_size > 1]
    if bubbles:
        parts.append(f"mean bubble {100 * sum(bubbles) / len(bubbles):.0f}%")
    return "; ".join(parts)


def model_info(llm) -> dict:
    c = llm.config
    bytes_per_value = llm.dtype.itemsize if hasattr(llm.dtype, "itemsize") else 2
    return {
        "model": c.name, "device": str(llm.device), "dtype": str(llm.dtype).removeprefix("torch."),
        "num_layers": c.num_layers, "hidden_size": c.hidden_size, "num_heads": c.num_heads,
        "num_kv_heads": c.num_kv_heads, "head_dim": c.head_dim, "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size, "rope_theta": c.rope_theta, "context_length": c.max_position_embeddings,
        "max_model_len": llm.engine.max_model_len,
        "kv_cache_blocks": llm.engine.kv_plan.num_blocks, "kv_cache_sized_by": llm.engine.kv_plan.source,
        "tied_embeddings": c.tie_word_embeddings,
        "parameters": sum(p.numel() for p in llm.model.parameters()),
        "kv_bytes_per_token": c.kv_bytes_per_token(bytes_per_value),
        "kv_bytes_per_token_formula": f"2 x {c.num_layers} layers x {c.num_kv_heads} kv heads x {c.head_dim} dims x {bytes_per_value} bytes",
        "tokenizer": llm.tokenizer.name, "tokenizer_vocab_size": llm.tokenizer.vocab_size,
    }


def cmd_info(args) -> int:
    info = model_info(make_llm(args))
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(map(len, info))
        for k, v in info.items():
            print(f"{k:<{width}}  {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k:<{width}}  {v}")
    return 0


def cmd_serve(args) -> int:
    import logging

    from .serve import ApiServer, ServerLimits
    limits = ServerLimits(max_concurrent=args.max_concurrent, max_waiting=args.max_waiting,
                          max_tokens=args.max_tokens_limit)     # checked before the model loads
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    llm = make_llm(args)
    try:
        server = ApiServer(llm, host=args.host, port=args.port, api_key=args.api_key, limits=limits,
                           served_model_name=args.served_model_name)
        print(f"serving {server.state.model_name(llm)} at {server.url} "
              f"({'API key required' if args.api_key else 'no API key'}); Ctrl-C stops", flush=True)
        server.serve_forever()
    except OSError as e:                 # the port is taken, the address is not ours
        raise RuntimeError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    finally:
        llm.close()
    return 0


def cmd_bench(args) -> int:
    import importlib
    main = importlib.import_module(BENCHES[args.name][1]).main
    return main(args.rest) or 0


def main(argv: list[str] | None = None) -> int:
    from .loader.weights import WeightsError
    args = build_parser().parse_args(argv)
    try:
        return {"generate": cmd_generate, "info": cmd_info, "serve": cmd_serve,
                "bench": cmd_bench}[args.command](args)
    except (WeightsError, ValueError, RuntimeError) as e:
        # Problems the user can fix get one clear message, not a traceback wall.
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
