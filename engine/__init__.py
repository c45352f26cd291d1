"""A small LLM inference engine, written to be read: see README.md, docs/ARCHITECTURE.md and the chapters.

The public API. The benchmarks' workload helpers (engine/bench/) are reachable from here for the
widgets, but `import engine` does not load them: they are imported on first use (__getattr__).
"""
from importlib import import_module

from .config import EngineConfig, ModelConfig, SpeculativeConfig
from .core.step_trace import ScheduledEntry, StepRecord
from .distributed import ParallelStep, ideal_bubble, parallel_layout, tensor_parallel_sizes
from .engine_loop import EngineClosed
from .llm import LLM
from .loader.tokenizer import gpt2_tokenizer
from .loader.weights import WeightsError
from .loop_stats import LoopStats
from .model.sampler import filter_logits, sampling_probs
from .inputs import TextPrompt, TokensPrompt
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .sandbox import SandboxFreed
from .spec_decode import SpecDecodeStats, expected_speedup, expected_tokens_per_pass

_FROM_BENCH = {   # name -> (module in engine/bench/, its name there)
    "load_recorded": ("recorded", "load_recorded"),
    "SERVING_PATTERNS": ("serve_sim", "PATTERNS"),
    "workload_lengths": ("serve_sim", "workload_lengths"),
    "make_workload": ("serve_sim", "make_workload"),
    "serve_workload": ("serve_sim", "serve_workload"),
    "SimRequest": ("serve_sim", "SimRequest"),
    "ServeRun": ("serve_sim", "ServeRun"),
}


def __getattr__(name: str):
    if name in _FROM_BENCH:
        module, attr = _FROM_BENCH[name]
        return getattr(import_module(f"{__name__}.bench.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LLM", "SamplingParams", "EngineConfig", "ModelConfig", "SpeculativeConfig",
           "TextPrompt", "TokensPrompt", "RequestOutput", "CompletionOutput", "Logprob", "RequestMetrics", "StreamEvent", "WeightsError", "SandboxFreed", "EngineClosed",
           "StepRecord", "ScheduledEntry", "LoopStats", "gpt2_tokenizer", "filter_logits", "sampling_probs",
           "ParallelStep", "ideal_bubble", "parallel_layout", "tensor_parallel_sizes",
           "SpecDecodeStats", "expected_tokens_per_pass", "expected_speedup", *_FROM_BENCH]
