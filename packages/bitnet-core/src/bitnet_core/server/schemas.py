"""Request bodies of the OpenAI-compatible endpoints (pydantic), and the error body.

No field is silently ignored: any field we do not implement (``n`` > 1,
``tools``, ``logit_bias``...) is refused with a clear 400 when it asks for
something; one that asks for nothing (``tools: []``, ``presence_penalty: 0``,
``store: false``) is accepted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from ..model.sampling import SamplingParams

#: Unknown fields are accepted only empty (``unsupported``); the schema says so.
_EMPTY = {"enum": [None, False, 0, "", [], {}]}


class _Sampling(BaseModel):
    # strict: a JSON type the schema does not list is refused, not coerced ("1" -> 1)
    model_config = ConfigDict(
        extra="allow", strict=True, json_schema_extra={"additionalProperties": _EMPTY}
    )

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=0, le=1 << 20)
    max_completion_tokens: int | None = Field(default=None, ge=0, le=1 << 20)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0, le=10.0)
    # OpenAI's range, but only 0 is served (``unsupported``: use repeat_penalty)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0, json_schema_extra={"enum": [0]})
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0, json_schema_extra={"enum": [0]})
    seed: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, bool] | None = Field(
        default=None,
        json_schema_extra={
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"include_usage": {"type": "boolean"}},
                    "additionalProperties": False,
                },
                {"type": "null"},
            ]
        },
    )
    n: int = Field(default=1, ge=1, le=1)
    user: str | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, v: Any) -> Any:
        if v and set(v) - {"include_usage"}:
            raise ValueError(
                "only include_usage is supported (usage always comes in the last chunk)"
            )
        return v

    @field_validator("response_format")
    @classmethod
    def _response_format(cls, v: Any) -> Any:
        if v is None:
            return v
        kind = v.get("type")
        if kind not in ("text", "json_object", "json_schema"):
            raise ValueError("type must be 'text', 'json_object' or 'json_schema'")
        if kind == "json_schema":
            spec = v.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
                raise ValueError("json_schema needs a 'schema' object")
        return v

    def json_schema(self) -> tuple[bool, dict | None]:
        """(constrained, schema): ``json_object`` is (True, None), ``text``/absent (False, None)."""
        kind = (self.response_format or {}).get("type", "text")
        if kind == "json_schema":
            return True, self.response_format["json_schema"]["schema"]  # type: ignore[index]
        return kind == "json_object", None

    def logprob_count(self) -> int | None:
        """How many top alternatives to report per token; None: no logprobs asked for."""
        return None

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
        """Name of a field that asks for something we do not implement, if any."""
        for key, value in (self.model_extra or {}).items():
            if value not in (None, False, 0, [], {}, ""):
                return key
        if self.frequency_penalty or self.presence_penalty:
            return "frequency_penalty/presence_penalty (use repeat_penalty)"
        return None


class CompletionRequest(_Sampling):
    # one prompt: a text, a list of one text, or token ids
    prompt: str | list[str] | list[StrictInt] = Field(
        json_schema_extra={
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1},
                {"type": "array", "items": {"type": "integer"}},
            ]
        }
    )
    logprobs: StrictInt | None = Field(default=None, ge=0, le=20)  # a bool is the chat field

    def logprob_count(self) -> int | None:
        return self.logprobs

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
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @field_validator("top_logprobs")
    @classmethod
    def _top(cls, v: Any, info: Any) -> Any:
        if v and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return v

    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


def error_body(
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict:
    """The OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """The body of every error answer (``error_body``), as the OpenAPI schema documents it."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error answers with the OpenAI error body."""
    why = {
        400: "the request is malformed or asks for what the model cannot do",
        401: "missing or wrong API key (when the server has one)",
        404: "no such model",
        413: "the request body is over the server's limit",
        429: "the queue is full: retry later",
    }
    return {s: {"model": ErrorResponse, "description": why[s]} for s in statuses}
