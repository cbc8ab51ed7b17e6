"""Request bodies of the OpenAI-compatible endpoints (pydantic), and the error body.

Fields we do not implement but clients commonly send (``n`` > 1, ``logprobs``,
``tools``...) are refused with a clear 400 rather than silently ignored;
harmless ones (``user``, ``presence_penalty`` = 0) are accepted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..model.sampling import SamplingParams


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=0, le=1 << 20)
    max_completion_tokens: int | None = Field(default=None, ge=0, le=1 << 20)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0, le=10.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = Field(default=1, ge=1, le=1)
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: Any) -> Any:
        if isinstance(v, list) and (len(v) > 4 or not all(isinstance(s, str) and s for s in v)):
            raise ValueError("stop must be a string or up to 4 non-empty strings")
        return v

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        max_tokens = self.max_completion_tokens or self.max_tokens
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
            seed=self.seed,
            max_tokens=default_max_tokens if max_tokens is None else max_tokens,
            stop=tuple(stops),
        )

    def unsupported(self) -> str | None:
        """Name of a requested feature we do not implement, if any."""
        extra = self.model_extra or {}
        for key in (
            "logprobs",
            "tools",
            "functions",
            "tool_choice",
            "logit_bias",
            "best_of",
            "suffix",
            "echo",
        ):
            value = extra.get(key)
            if value not in (None, False, 0, [], {}):
                return key
        if self.frequency_penalty or self.presence_penalty:
            return "frequency_penalty/presence_penalty (use repeat_penalty)"
        return None


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError("one prompt per request (n=1, no batched prompts)")
            return v[0]
        return v


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)


def error_body(
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict:
    """The OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
