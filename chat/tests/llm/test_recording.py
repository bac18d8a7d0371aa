"""A turn's model exchange lands on its ``Turn`` row."""

from __future__ import annotations

import asyncio

import pytest

from chat.llm.attempts import AttemptRunner, TurnCompletion
from chat.llm.base import ModelSpec
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply, ScriptedToolCall
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.recording import turn_record_completion
from chat.llm.tools import ToolBox
from chat.models import Turn
from chat.tests.llm.conftest import (
    TEST_TIMEOUTS,
    FakeShortTermMemory,
    RecordingRender,
    RecordingSleep,
)
from personas.models import GuildConfig, Persona

MEMORY = {"summary": "Ann asked about practice."}


async def exchange(script: list[Reply | Fault]) -> tuple[TurnCompletion, list[dict]]:
    """Run one turn with a memory tool against a fake server answering ``script``."""
    async with (
        FakeLLMServer(script=script) as server,
        OpenAICompatibleClient(base_url=server.base_url, timeouts=TEST_TIMEOUTS) as client,
    ):
        runner = AttemptRunner(client, sleep=RecordingSleep())
        completion = await runner.complete_turn(
            models=[ModelSpec("primary-model"), ModelSpec("backup-model")],
            render=RecordingRender(),
            persona_name="Tomori",
            toolbox=ToolBox(
                allowlist=["update_short_term_memory"], short_term_memory=FakeShortTermMemory()
            ),
        )
        return completion, server.chat_bodies


@pytest.fixture
def turn() -> Turn:
    guild = GuildConfig.objects.create(guild_id=1001, name="Band practice")
    persona = Persona.objects.create(guild=guild, name="Tomori", is_main=True)
    return Turn.objects.create(
        guild_id=1001,
        channel_id=2002,
        persona=persona,
        persona_name="Tomori",
        reason=Turn.Reason.MENTION,
        warnings=["history truncated"],
    )


@pytest.mark.django_db
def test_usage_attempts_request_and_reply_are_stored_on_the_turn(turn: Turn) -> None:
    completion, bodies = asyncio.run(
        exchange(
            [
                Fault(FaultKind.HTTP_ERROR, status=401),
                Reply(
                    tool_calls=(ScriptedToolCall("update_short_term_memory", MEMORY),),
                    prompt_tokens=100,
                    completion_tokens=12,
                    cached_prompt_tokens=0,
                ),
                Reply(
                    "See you at six!",
                    prompt_tokens=140,
                    completion_tokens=5,
                    cached_prompt_tokens=96,
                ),
            ]
        )
    )

    turn_record_completion(turn=turn, completion=completion)

    turn.refresh_from_db()
    assert (turn.prompt_tokens, turn.completion_tokens, turn.cached_prompt_tokens) == (
        240,
        17,
        96,
    )
    assert turn.reply_text == "See you at six!"
    assert turn.request == bodies[-1]
    assert [(a["model"], a["outcome"], a["status"]) for a in turn.attempts] == [
        ("primary-model", "client_error", 401),
        ("backup-model", "ok", None),
        ("backup-model", "ok", None),
    ]
    assert turn.attempts[2]["usage"] == {
        "prompt_tokens": 140,
        "completion_tokens": 5,
        "cached_prompt_tokens": 96,
    }
    assert turn.llm_ms == completion.llm_ms > 0
    assert turn.error == ""
    assert turn.warnings[0] == "history truncated"
    assert "fell back to backup-model" in turn.warnings[1]
    assert turn.status == Turn.Status.RUNNING


@pytest.mark.django_db
def test_a_turn_whose_models_all_failed_records_the_error_and_no_tokens(turn: Turn) -> None:
    completion, _ = asyncio.run(
        exchange([Fault(FaultKind.HTTP_ERROR, status=401), Fault(FaultKind.HTTP_ERROR, status=404)])
    )

    turn_record_completion(turn=turn, completion=completion)

    turn.refresh_from_db()
    assert turn.error.startswith("client_error (HTTP 404)")
    assert turn.reply_text == ""
    assert (turn.prompt_tokens, turn.completion_tokens, turn.cached_prompt_tokens) == (
        None,
        None,
        None,
    )
    assert len(turn.attempts) == 2
