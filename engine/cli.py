"""`python -m engine ...`: generate text, describe the model, run benchmarks.

    python -m engine generate "What is the capital of France?"     # streams tokens to the terminal
    python -m engine info                                          # shapes, parameters, KV bytes per token
    python -m engine bench kernels | serve-sim [options]           # JSON on stdout
"""
from __future__ import annotations

import argparse
import json
import sys

BENCHES = {
    "kernels": ("kernels.bench", "paged-attention kernels vs the bandwidth limit and SDPA (needs a GPU for real numbers)"),
    "serve-sim": ("engine.bench_serve", "a synthetic serving workload: continuous vs static batching"),
}


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a local Llama GGUF file or Hugging Face folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--random-weights", action="store_true", help="same shapes, random values (for speed tests)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="A small LLM inference engine.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text from a prompt, streaming tokens as they come")
    g.add_argument("prompt")
    g.add_argument("--raw", action="store_true", help="do not apply the chat template")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stats", action="store_true", help="print TTFT, inter-token latency and tokens/s at the end")
    _model_args(g)

    i = sub.add_parser("info", help="print the model's shapes, parameter count and KV-cache bytes per token")
    i.add_argument("--json", action="store_true")
    _model_args(i)

    b = sub.add_parser("bench", help="benchmarks that print JSON: " + ", ".join(BENCHES))
    b.add_argument("name", choices=sorted(BENCHES), help="; ".join(f"{k}: {v[1]}" for k, v in BENCHES.items()))
    b.add_argument("rest", nargs=argparse.REMAINDER, help="options passed to the benchmark (see its --help)")
    return parser


def cmd_generate(args) -> int:
    import time

    from . import LLM, SamplingParams
    llm = LLM(model=args.model, device=args.device, dtype=args.dtype, random_weights=args.random_weights)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_tokens=args.max_tokens, seed=args.seed)
    start = time.perf_counter()
    times = []
    for ev in llm.stream(args.prompt, params, chat=not args.raw):
        times.append(time.perf_counter())
        sys.stdout.write(ev.text_delta)
        sys.stdout.flush()
    sys.stdout.write("\n")
    if args.stats and times:
        gaps = [b - a for a, b in zip(times, times[1:])]
        itl = sum(gaps) / len(gaps) if gaps else 0.0
        print(f"[{len(times)} tokens on {llm.device}: TTFT {times[0] - start:.3f}s, "
              f"mean ITL {itl * 1000:.1f} ms, {len(times) / (times[-1] - start):.1f} tokens/s]", file=sys.stderr)
    return 0


def model_info(llm) -> dict:
    c = llm.config
    bytes_per_value = llm.dtype.itemsize if hasattr(llm.dtype, "itemsize") else 2
    return {
        "model": c.name, "device": str(llm.device), "dtype": str(llm.dtype).removeprefix("torch."),
        "num_layers": c.num_layers, "hidden_size": c.hidden_size, "num_heads": c.num_heads,
        "num_kv_heads": c.num_kv_heads, "head_dim": c.head_dim, "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size, "rope_theta": c.rope_theta, "context_length": c.max_position_embeddings,
        "tied_embeddings": c.tie_word_embeddings,
        "parameters": sum(p.numel() for p in llm.model.parameters()),
        "kv_bytes_per_token": c.kv_bytes_per_token(bytes_per_value),
        "kv_bytes_per_token_formula": f"2 x {c.num_layers} layers x {c.num_kv_heads} kv heads x {c.head_dim} dims x {bytes_per_value} bytes",
        "tokenizer": llm.tokenizer.name, "tokenizer_vocab_size": llm.tokenizer.vocab_size,
    }


def cmd_info(args) -> int:
    from . import LLM
    info = model_info(LLM(model=args.model, device=args.device, dtype=args.dtype, random_weights=args.random_weights))
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(map(len, info))
        for k, v in info.items():
            print(f"{k:<{width}}  {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k:<{width}}  {v}")
    return 0


def cmd_bench(args) -> int:
    import importlib
    module = importlib.import_module(BENCHES[args.name][0])
    return module.main(args.rest) or 0


def main(argv: list[str] | None = None) -> int:
    from .weights import WeightsError
    args = build_parser().parse_args(argv)
    try:
        return {"generate": cmd_generate, "info": cmd_info, "bench": cmd_bench}[args.command](args)
    except (WeightsError, ValueError, RuntimeError) as e:
        # Problems the user can fix get one clear message, not a traceback wall.
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
