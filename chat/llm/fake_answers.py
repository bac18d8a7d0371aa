"""The fake model server's answers (`chat.llm.fake_server`) in OpenAI's two wire shapes each:
a whole JSON response, or the chunks of a stream, the text a word at a time."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chat.llm.fake_server import Reply, ScriptedToolCall

_WORD = re.compile(r"\s*\S+\s*")


@dataclass(frozen=True)
class ChatAnswer:
    """One answer in both wire shapes: a whole response, or stream chunks."""

    id: str
    model: str
    reply: Reply
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.reply.tool_calls else "stop"

    def tool_calls(self) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{self.id}_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_text(call)},
            }
            for index, call in enumerate(self.reply.tool_calls)
        ]

    def response(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.reply.text}
        if self.reply.tool_calls:
            message["content"] = self.reply.text or None
            message["tool_calls"] = self.tool_calls()
        return {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }

    @property
    def words(self) -> int:
        """How many text chunks `chunks` gives (one per word)."""
        return len(_WORD.findall(self.reply.text))

    def chunks(self, include_usage: bool) -> Iterator[str]:
        """The answer as ``chat.completion.chunk`` JSON texts: the role, the text a word at a
        time, each tool call's name then its arguments in two pieces, the finish reason, and
        (when asked for) a final usage chunk with no choices."""
        yield self._chunk({"role": "assistant", "content": ""})
        for word in _WORD.findall(self.reply.text):
            yield self._chunk({"content": word})
        for index, call in enumerate(self.tool_calls()):
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            middle = len(arguments) // 2
            head = {"name": name, "arguments": arguments[:middle]}
            first = {"index": index, "id": call["id"], "type": "function", "function": head}
            rest = {"index": index, "function": {"arguments": arguments[middle:]}}
            yield self._chunk({"tool_calls": [first]})
            yield self._chunk({"tool_calls": [rest]})
        yield self._chunk({}, finish_reason=self.finish_reason)
        if include_usage:
            yield json.dumps(self._envelope([]) | {"usage": self.usage})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return json.dumps(self._envelope([choice]))

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "model": self.model,
            "choices": choices,
        }


@dataclass(frozen=True)
class TextAnswer:
    """One Completions answer in both wire shapes."""

    id: str
    model: str
    text: str
    usage: dict[str, Any] = field(default_factory=dict)

    def response(self) -> dict[str, Any]:
        choice = {"index": 0, "text": self.text, "finish_reason": "stop", "logprobs": None}
        return {
            "id": self.id,
            "object": "text_completion",
            "model": self.model,
            "choices": [choice],
            "usage": self.usage,
        }

    @property
    def words(self) -> int:
        return len(_WORD.findall(self.text))

    def chunks(self, include_usage: bool) -> Iterator[str]:
        """An empty first chunk, the text a word at a time, the finish reason, and (when asked
        for) a usage chunk with no choices."""
        yield self._chunk("")
        for word in _WORD.findall(self.text):
            yield self._chunk(word)
        yield self._chunk("", finish_reason="stop")
        if include_usage:
            yield json.dumps(self._envelope([]) | {"usage": self.usage})

    def _chunk(self, text: str, finish_reason: str | None = None) -> str:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        return json.dumps(self._envelope([choice]))

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "model": self.model, "choices": choices}


def arguments_text(call: ScriptedToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
