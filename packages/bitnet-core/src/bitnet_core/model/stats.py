"""Token counts and timings of one generation."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class GenerationStats:
    """Token counts and timings of one generation (or bench run)."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0
    decode_steps: int = 0  # forward calls of one token
    cached_tokens: int = 0  # prompt tokens reused from a session's KV cache
    finish_reason: str = ""  # "stop" (eos or stop string), "length", "context"
    #: "device": greedy tokens chosen on the device, DEVICE_TOKENS a launch (the runner's
    #: ``decode_greedy``); "host": logits to the host each step (sampling, penalties,
    #: logit processors, or a runner without it)
    token_path: str = ""

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(
            prompt_tokens_per_s=self.prompt_tokens_per_s,
            decode_tokens_per_s=self.decode_tokens_per_s,
        )
        return d
