"""The model: the ``load`` API, sampling, generation and receipts, with the engine the
SDK holds (``bitnet_core.sdk``: the generic runner, weights, KV cache, memory pool)
re-exported for callers of the model."""

from ..sdk.kv_cache import EvictionPolicy, KVCache, KVCacheConfig, Sequence
from ..sdk.memory_pool import MemoryPool, PoolStats
from ..sdk.runner import GenericRunner
from ..sdk.weights import DeviceWeights, ModelWeights
from .api import Model, demo_model_path, load
from .generation import GenerationStats, Session, generate_tokens
from .random import byte_tokenizer_metadata, random_model_file, random_weights
from .sampling import Sampler, SamplingParams, StopMatcher

__all__ = [
    "DeviceWeights",
    "EvictionPolicy",
    "GenerationStats",
    "GenericRunner",
    "KVCache",
    "KVCacheConfig",
    "MemoryPool",
    "Model",
    "ModelWeights",
    "PoolStats",
    "Sampler",
    "SamplingParams",
    "Sequence",
    "Session",
    "StopMatcher",
    "byte_tokenizer_metadata",
    "demo_model_path",
    "generate_tokens",
    "load",
    "random_model_file",
    "random_weights",
]
