"""A small LLM inference engine, written to be read: see README.md, docs/ARCHITECTURE.md and the chapters."""
from .bench.recorded import load_recorded
from .bench.serve_sim import PATTERNS, ServeRun, SimRequest, make_workload, serve_workload, workload_lengths
from .bench.serve_sim import PATTERNS as SERVING_PATTERNS
from .config import EngineConfig, ModelConfig
from .core.step_trace import ScheduledEntry, StepRecord
from .engine_loop import EngineClosed, LoopStats
from .distributed import ParallelStep, ideal_bubble, parallel_layout, tensor_parallel_sizes
from .llm import LLM
from .loader.tokenizer import gpt2_tokenizer
from .loader.weights import WeightsError
from .model.sampler import filter_logits, sampling_probs
from .outputs import RequestMetrics, RequestOutput, StreamEvent
from .sandbox import SandboxFreed
from .sampling_params import SamplingParams
from .spec_decode import SpecDecodeStats, SpeculativeConfig, expected_speedup, expected_tokens_per_pass

__all__ = ["LLM", "SamplingParams", "EngineConfig", "ModelConfig", "RequestOutput", "RequestMetrics",
           "StreamEvent", "WeightsError", "StepRecord", "ScheduledEntry", "gpt2_tokenizer",
           "filter_logits", "sampling_probs", "load_recorded", "LoopStats",
           "SERVING_PATTERNS", "workload_lengths",
           "ParallelStep", "ideal_bubble", "parallel_layout", "tensor_parallel_sizes",
           "SpeculativeConfig", "SpecDecodeStats", "expected_tokens_per_pass", "expected_speedup",
           "PATTERNS", "SimRequest", "ServeRun", "make_workload", "serve_workload", "SandboxFreed", "EngineClosed"]
