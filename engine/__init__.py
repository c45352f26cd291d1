"""A small LLM inference engine, written to be read: see README.md and the chapters in content/."""
from .config import EngineConfig, ModelConfig
from .llm import LLM
from .outputs import RequestMetrics, RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .weights import WeightsError

__all__ = ["LLM", "SamplingParams", "EngineConfig", "ModelConfig", "RequestOutput", "RequestMetrics",
           "StreamEvent", "WeightsError"]
