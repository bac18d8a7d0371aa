"""Deliberate Tool Mode: which tools are offered, running calls, and the bounded tool loop."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from chat.llm.attempts import MAX_TOOL_ROUNDS, AttemptRunner
from chat.llm.base import ModelSpec, ToolCall
from chat.llm.fake_server import FakeLLMServer, Reply, ScriptedToolCall
from chat.llm.tools import (
    MAX_CALLS_PER_ROUND,
    TOOL_DEFINITIONS,
    MessageMetadata,
    ToolAttachment,
    ToolBox,
    ToolError,
    ToolName,
    VisionModel,
    sample_gif_frames,
)
from chat.pipeline.tools import TOOL_CATALOGUE
from chat.tests.llm.conftest import FakeShortTermMemory, RecordingRender

MODEL = ModelSpec("fake-model")
NOTES = ToolAttachment("media_1", "notes.txt", "https://cdn.example/notes.txt", "text/plain", 27)
PHOTO = ToolAttachment("media_2", "cat.png", "https://cdn.example/cat.png", "image/png", 4096)
BLOB = ToolAttachment("media_3", "data.bin", "https://cdn.example/data.bin", "", 8)
ATTACHMENTS = {a.media_id: a for a in (NOTES, PHOTO, BLOB)}
FIRST_MESSAGE = MessageMetadata(
    "Ann", datetime(2026, 7, 11, 9, 30, tzinfo=UTC), reply_to_ref="ref_0", media_ids=("media_2",)
)


@dataclass
class FakeAttachmentReader:
    files: dict[str, bytes] = field(
        default_factory=lambda: {
            NOTES.url: b"shopping: eggs, milk, bread",
            BLOB.url: b"\x00\x01\x02\x03binary",
        }
    )

    async def read(self, attachment: ToolAttachment, *, max_bytes: int) -> bytes:
        if attachment.url not in self.files:
            raise ToolError(f"{attachment.filename} is no longer available")
        return self.files[attachment.url][:max_bytes]


@dataclass
class FakeMessageMetadata:
    lookups: list[str] = field(default_factory=list)

    async def metadata(self, ref: str) -> MessageMetadata | None:
        self.lookups.append(ref)
        return FIRST_MESSAGE if ref == "ref_1" else None


def full_toolbox(**overrides: Any) -> ToolBox:
    """Every tool allowed; every dependency but vision configured unless overridden."""
    dependencies: dict[str, Any] = {
        "allowlist": list(ToolName),
        "attachments": ATTACHMENTS,
        "attachment_reader": FakeAttachmentReader(),
        "message_metadata": FakeMessageMetadata(),
        "short_term_memory": FakeShortTermMemory(),
    }
    return ToolBox(**dependencies | overrides)


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def run(toolbox: ToolBox, name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    result = await toolbox.run(ToolCall(id="call_1", name=name, arguments=raw))
    return json.loads(result.content)


# --- What is offered ----------------------------------------------------------------------------


async def test_unconfigured_tools_are_never_offered(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    toolbox = ToolBox(allowlist=list(ToolName), message_metadata=FakeMessageMetadata())

    await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", toolbox=toolbox
    )

    [body] = fake_server.chat_bodies
    assert offered(body) == ["reveal_message_metadata"]
    assert render.plans[0].tools == (ToolName.REVEAL_MESSAGE_METADATA,)


async def test_configured_tools_outside_the_allowlist_are_not_offered(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    toolbox = full_toolbox(allowlist=["read_file", "update_short_term_memory"])

    await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", toolbox=toolbox
    )

    [body] = fake_server.chat_bodies
    assert offered(body) == ["read_file", "update_short_term_memory"]


async def test_analyze_image_is_offered_only_with_a_vision_model(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    vision = VisionModel(runner.client, ModelSpec("vision-model", supports_vision=True))

    for toolbox in (full_toolbox(), full_toolbox(vision=vision)):
        await runner.complete_turn(
            models=[MODEL], render=render, persona_name="Tomori", toolbox=toolbox
        )

    without_vision, with_vision = fake_server.chat_bodies
    assert "analyze_image" not in offered(without_vision)
    assert "analyze_image" in offered(with_vision)


async def test_with_nothing_offered_the_request_has_no_tools_and_stray_calls_are_ignored(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    stray_call = ScriptedToolCall("read_file", {"media_id": "media_1"})
    fake_server.enqueue(Reply("Sure, Ann.", tool_calls=(stray_call,)))

    completion = await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", toolbox=full_toolbox(allowlist=[])
    )

    [body] = fake_server.chat_bodies
    assert "tools" not in body
    assert "tool_choice" not in body
    assert completion.reply_text == "Sure, Ann."


def test_each_definition_is_a_function_whose_schema_rejects_unknown_arguments() -> None:
    for name, spec in TOOL_DEFINITIONS.items():
        definition = spec.definition()
        assert definition["type"] == "function"
        assert definition["function"]["name"] == name
        assert definition["function"]["parameters"]["type"] == "object"
        assert definition["function"]["parameters"]["additionalProperties"] is False


# --- The tool loop ------------------------------------------------------------------------------


async def test_tool_rounds_stop_at_three_then_the_model_answers_without_tools(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    lookup = FakeMessageMetadata()
    looking_up = Reply.calling("reveal_message_metadata", {"ref": "ref_1"})
    fake_server.enqueue(*[looking_up] * MAX_TOOL_ROUNDS, Reply("It was Ann."))

    completion = await runner.complete_turn(
        models=[MODEL],
        render=render,
        persona_name="Tomori",
        toolbox=full_toolbox(message_metadata=lookup),
    )

    bodies = fake_server.chat_bodies
    assert len(bodies) == MAX_TOOL_ROUNDS + 1 == 4
    assert all(offered(body) for body in bodies[:MAX_TOOL_ROUNDS])
    assert "tools" not in bodies[-1]
    assert render.plans[-1].tools == ()
    assert lookup.lookups == ["ref_1"] * MAX_TOOL_ROUNDS
    assert len(tool_results(bodies[-1])) == MAX_TOOL_ROUNDS
    assert [a.tool_round for a in completion.attempts] == [0, 1, 2, 3]
    assert completion.reply_text == "It was Ann."
    assert any("tool rounds" in warning for warning in completion.warnings)


async def test_a_model_that_still_calls_tools_after_the_last_round_runs_nothing_more(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    lookup = FakeMessageMetadata()
    looking_up = Reply.calling("reveal_message_metadata", {"ref": "ref_1"})
    fake_server.enqueue(*[looking_up] * (MAX_TOOL_ROUNDS + 1), Reply("It was Ann."))

    completion = await runner.complete_turn(
        models=[MODEL],
        render=render,
        persona_name="Tomori",
        toolbox=full_toolbox(message_metadata=lookup),
    )

    assert len(lookup.lookups) == MAX_TOOL_ROUNDS
    assert [a.outcome for a in completion.attempts][MAX_TOOL_ROUNDS:] == ["empty_answer", "ok"]
    assert completion.reply_text == "It was Ann."


async def test_short_term_memory_is_updated_only_once_per_turn(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    memory = FakeShortTermMemory()
    fake_server.enqueue(
        Reply.calling("update_short_term_memory", {"summary": "Ann is shopping."}),
        Reply.calling("update_short_term_memory", {"summary": "Ann bought eggs."}),
        Reply("Noted!"),
    )

    completion = await runner.complete_turn(
        models=[MODEL],
        render=render,
        persona_name="Tomori",
        toolbox=full_toolbox(short_term_memory=memory),
    )

    assert memory.summaries == ["Ann is shopping."]
    first, second = tool_results(fake_server.chat_bodies[-1])
    assert first == {"updated": True}
    assert "already updated" in second["error"]
    assert completion.reply_text == "Noted!"


async def test_malformed_tool_arguments_reach_the_model_as_an_error_result(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(
        Reply.calling("reveal_message_metadata", '{"ref": "ref_1"'), Reply("Sorry, Ann.")
    )

    completion = await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", toolbox=full_toolbox()
    )

    [result] = tool_results(fake_server.chat_bodies[-1])
    assert result["error"].startswith("invalid arguments")
    assert completion.reply_text == "Sorry, Ann."


async def test_the_tool_exchange_is_sent_back_before_a_prefill(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    render.messages.append({"role": "assistant", "content": "Tomori:"})
    fake_server.enqueue(Reply.calling("read_file", {"media_id": "media_1"}), Reply(" Eggs."))

    completion = await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", toolbox=full_toolbox()
    )

    roles = [m["role"] for m in fake_server.chat_bodies[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert fake_server.chat_bodies[-1]["messages"][-1] == {
        "role": "assistant",
        "content": "Tomori:",
    }
    assert completion.reply_text == "Eggs."


async def test_analyze_image_asks_the_vision_model_and_its_tokens_count(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    vision = VisionModel(runner.client, ModelSpec("vision-model", supports_vision=True))
    arguments = {"media_id": "media_2", "question": "Which animal?"}
    fake_server.enqueue(
        Reply(tool_calls=(ScriptedToolCall("analyze_image", arguments),), prompt_tokens=80),
        Reply("<think>fur, whiskers</think>A cat on a sofa.", prompt_tokens=50),
        Reply("It's a cat!", prompt_tokens=120),
    )

    completion = await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", toolbox=full_toolbox(vision=vision)
    )

    vision_request = fake_server.chat_bodies[1]
    assert vision_request["model"] == "vision-model"
    assert vision_request["messages"][0]["content"] == [
        {"type": "text", "text": "Which animal?"},
        {"type": "image_url", "image_url": {"url": PHOTO.url}},
    ]
    assert tool_results(fake_server.chat_bodies[-1]) == [
        {"media_id": "media_2", "analysis": "A cat on a sofa."}
    ]
    assert completion.reply_text == "It's a cat!"
    assert completion.usage.prompt_tokens == 80 + 50 + 120


# --- Each tool ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("{not json", "invalid arguments: arguments: Invalid JSON"),
        ("[]", "invalid arguments"),
        ({}, "invalid arguments: ref: Field required"),
        ({"ref": "1234567890"}, "invalid arguments: ref: String should match pattern"),
        ({"ref": "ref_1", "user": "Ann"}, "invalid arguments: user: Extra inputs"),
    ],
)
async def test_invalid_arguments_are_described_to_the_model(
    arguments: str | dict[str, Any], problem: str
) -> None:
    lookup = FakeMessageMetadata()

    result = await run(full_toolbox(message_metadata=lookup), "reveal_message_metadata", arguments)

    assert result["error"].startswith(problem)
    assert lookup.lookups == []


@pytest.mark.parametrize("name", ["read_file", "delete_channel"])
async def test_a_tool_not_offered_is_refused(name: str) -> None:
    result = await run(full_toolbox(allowlist=["reveal_message_metadata"]), name, {})

    assert result == {"error": f"the tool {name!r} is not available in this reply"}


async def test_read_file_returns_the_text_capped_and_says_when_it_is_cut() -> None:
    whole = await run(full_toolbox(), "read_file", {"media_id": "media_1"})
    capped = await run(full_toolbox(read_limit_bytes=8), "read_file", {"media_id": "media_1"})

    assert whole == {
        "media_id": "media_1",
        "filename": "notes.txt",
        "content": "shopping: eggs, milk, bread",
        "truncated": False,
    }
    assert (capped["content"], capped["truncated"]) == ("shopping", True)


@pytest.mark.parametrize(
    ("media_id", "error"),
    [
        ("media_2", "media_2 (cat.png) is not a text file"),
        ("media_3", "media_3 (data.bin) is not a text file"),
        ("media_9", "media_9 is not an attachment in this conversation"),
    ],
)
async def test_read_file_refuses_images_binaries_and_unknown_ids(media_id: str, error: str) -> None:
    assert await run(full_toolbox(), "read_file", {"media_id": media_id}) == {"error": error}


async def test_read_file_reports_a_file_the_reader_cannot_fetch() -> None:
    toolbox = full_toolbox(attachment_reader=FakeAttachmentReader(files={}))

    result = await run(toolbox, "read_file", {"media_id": "media_1"})

    assert result == {"error": "notes.txt is no longer available"}


async def test_reveal_message_metadata_speaks_in_prompt_keys_never_snowflakes() -> None:
    found = await run(full_toolbox(), "reveal_message_metadata", {"ref": "ref_1"})
    missing = await run(full_toolbox(), "reveal_message_metadata", {"ref": "ref_7"})

    assert found == {
        "ref": "ref_1",
        "author": "Ann",
        "sent_at": "2026-07-11T09:30:00+00:00",
        "reply_to": "ref_0",
        "media": ["media_2"],
    }
    assert missing == {"error": "ref_7 is not a message in this conversation"}


async def test_analyze_image_refuses_a_file_that_is_not_an_image(runner: AttemptRunner) -> None:
    vision = VisionModel(runner.client, ModelSpec("vision-model", supports_vision=True))

    result = await run(full_toolbox(vision=vision), "analyze_image", {"media_id": "media_1"})

    assert result == {"error": "media_1 (notes.txt) is not an image"}


async def test_calls_beyond_the_per_round_limit_are_refused_unrun() -> None:
    lookup = FakeMessageMetadata()
    calls = [
        ToolCall(id=f"call_{n}", name="reveal_message_metadata", arguments='{"ref": "ref_1"}')
        for n in range(MAX_CALLS_PER_ROUND + 2)
    ]

    results = await full_toolbox(message_metadata=lookup).run_round(calls)

    assert len(results) == len(calls)
    assert len(lookup.lookups) == MAX_CALLS_PER_ROUND
    assert ["error" in json.loads(r.content) for r in results[-3:]] == [False, True, True]


async def test_the_memory_tool_takes_categories_and_refuses_an_empty_update(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    memory = FakeShortTermMemory()
    six = {f"topic {n}": "x" for n in range(6)}
    fake_server.enqueue(
        Reply.calling("update_short_term_memory", {}),
        Reply.calling("update_short_term_memory", {"categories": six}),
        Reply.calling("update_short_term_memory", {"categories": {"plans": "gig on Sunday"}}),
        Reply("Noted!"),
    )

    await runner.complete_turn(
        models=[MODEL],
        render=render,
        persona_name="Tomori",
        toolbox=full_toolbox(short_term_memory=memory),
    )

    assert (memory.summaries, memory.categories) == ([""], [{"plans": "gig on Sunday"}])
    empty, too_many = (tool_results(body)[-1] for body in fake_server.chat_bodies[1:3])
    assert "give a summary or at least one category" in empty["error"]
    assert "categories" in too_many["error"]


def test_every_tool_the_pipeline_can_offer_without_configuration_exists() -> None:
    unconfigured = {tool.name for tool in TOOL_CATALOGUE if not tool.needs_configuration}
    assert unconfigured <= set(TOOL_DEFINITIONS)
    assert ToolName.ANALYZE_IMAGE in TOOL_DEFINITIONS


def animated_gif(colours: list[tuple[int, int, int]]) -> bytes:
    """A small GIF with one solid frame per colour."""
    from PIL import Image

    frames = [Image.new("RGB", (64, 48), colour) for colour in colours]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return out.getvalue()


def test_gif_frames_are_sampled_evenly_first_to_last() -> None:
    from PIL import Image

    colours = [(10 * n, 0, 255 - 10 * n) for n in range(10)]

    frames = sample_gif_frames(animated_gif(colours), frames=4)

    seen = [Image.open(io.BytesIO(frame)).convert("RGB").getpixel((5, 5)) for frame in frames]
    assert len(frames) == 4
    assert [pixel[0] // 10 for pixel in seen] == [0, 3, 6, 9]  # frames 0, 3, 6 and 9


async def test_process_gif_shows_the_vision_model_sampled_frames(
    fake_server: FakeLLMServer, runner: AttemptRunner
) -> None:
    dance = ToolAttachment(
        "media_4", "dance.gif", "https://cdn.example/dance.gif", "image/gif", 900
    )
    reader = FakeAttachmentReader(
        files={dance.url: animated_gif([(40 * n, 0, 0) for n in range(6)])}
    )
    vision = VisionModel(runner.client, ModelSpec("vision-model", supports_vision=True))
    toolbox = full_toolbox(attachments={"media_4": dance}, attachment_reader=reader, vision=vision)
    fake_server.enqueue(Reply("A square turning red."))

    result = await run(toolbox, "process_gif", {"media_id": "media_4"})

    parts = fake_server.chat_bodies[0]["messages"][0]["content"]
    assert parts[0]["text"].startswith("4 frames of one animation, in order.")
    assert all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in parts[1:])
    assert len(parts) == 5
    assert result == {"media_id": "media_4", "frames": 4, "analysis": "A square turning red."}


async def test_process_gif_is_offered_only_with_a_vision_model_and_refuses_a_still(
    runner: AttemptRunner,
) -> None:
    vision = VisionModel(runner.client, ModelSpec("vision-model", supports_vision=True))

    assert "process_gif" not in full_toolbox().offered
    assert "process_gif" in full_toolbox(vision=vision).offered
    refused = await run(full_toolbox(vision=vision), "process_gif", {"media_id": "media_2"})
    assert refused == {"error": "media_2 (cat.png) is not a GIF"}
