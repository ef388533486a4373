"""The OpenAI-compatible shapes the router speaks: requests in, completion objects and SSE chunks out."""

from __future__ import annotations

import json
import time
import uuid

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send fields we do not serve (logprobs, user, ...)

    model: str = ""
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0, le=2)
    stream: bool = False
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def num_max_tokens(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default


class CompletionRequest(_Request):
    prompt: str | list[str]

    @property
    def text(self) -> str:
        if isinstance(self.prompt, list):
            if len(self.prompt) != 1:
                raise ValueError("one prompt per request")
            return self.prompt[0]
        return self.prompt


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict] | None = ""

    @property
    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return "".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)

    @property
    def text(self) -> str:
        """The tiny model has no chat template of its own: one plain, stable layout."""
        turns = "".join(f"{m.role}: {m.text}\n" for m in self.messages)
        return turns + "assistant:"


class Completion:
    """Builds one response's objects; `chat` picks chat.completion shapes over text_completion ones."""

    def __init__(self, model: str, chat: bool):
        self.model, self.chat = model, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _base(self, suffix: str = "") -> dict:
        kind = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": kind + suffix, "created": self.created, "model": self.model}

    def full(self, text: str, finish_reason: str, num_prompt: int, num_completion: int) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason,
                      "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        usage = {"prompt_tokens": num_prompt, "completion_tokens": num_completion,
                 "total_tokens": num_prompt + num_completion}
        return self._base() | {"choices": [choice], "usage": usage}

    def chunk(self, text: str | None, finish_reason: str | None = None, *, is_first: bool = False) -> str:
        if self.chat:
            delta = ({"role": "assistant"} if is_first else {}) | ({"content": text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            body = self._base(".chunk") | {"choices": [choice]}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish_reason, "logprobs": None}
            body = self._base() | {"choices": [choice]}
        return f"data: {json.dumps(body)}\n\n"


def error_body(message: str, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
