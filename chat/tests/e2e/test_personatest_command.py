"""`manage.py personatest` as an operator's CI runs it: a real process on the test database,
asking the fake model over HTTP; one line per case and check, JUnit XML, exit 1 on a failing
check, 2 on a refused file with nothing run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.llm.fake_server import FakeLLMServer, Reply
from chat.models import PersonaTestResult, PersonaTestRun
from chat.pipeline.persona_checks import JUDGE_SYSTEM_PROMPT, json_differences
from chat.tests.celery_worker import ROOT, database_url
from chat.tests.e2e.conftest import DEMO_CONFIG
from personas.selectors import config_export
from personas.services import config_import

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GUILD = "1191168914227200002"
GREETS = {
    "name": "greets by name",
    "guild": GUILD,
    "persona": "Tomori",
    "history": [{"author": "alice", "content": "hi everyone"}],
    "message": {"author": "alice", "content": "tomori, do you remember me?"},
    "expect": {
        "contains": ["alice"],
        "not_contains": ["As an AI"],
        "max_chars": 400,
        "judge": "The reply stays in character as Tomori.",
    },
}
SHORT = {**GREETS, "name": "answers in ten characters", "expect": {"max_chars": 10}}


def judge_says_yes(body: dict):
    first = body["messages"][0]
    if first["role"] == "system" and first["content"] == JUDGE_SYSTEM_PROMPT:
        return Reply("YES\nIt stays quiet and kind, as Tomori does.")
    return None


@dataclass
class Done:
    code: int
    out: str
    err: str


@pytest.fixture
async def llm(transactional_db):
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))

    def respond(body: dict):
        return judge_says_yes(body) or server._default_reply(body)

    server = FakeLLMServer(responder=respond)
    async with server:
        yield server
    await sync_to_async(connections.close_all)()


async def personatest(llm: FakeLLMServer, *args: str) -> Done:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key",
        "DATABASE_URL": await sync_to_async(database_url)(),
        "LLM_BASE_URL": llm.base_url,
        "LLM_MODEL": "fake-model",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "personatest",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return Done(process.returncode, out.decode(), err.decode())


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


async def test_a_failing_check_exits_1_and_the_junit_lists_it(llm, tmp_path):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [GREETS, SHORT]})
    junit = tmp_path / "junit.xml"

    done = await personatest(llm, cases, "--junit", str(junit))

    assert done.code == 1, done.err
    lines = done.out.splitlines()
    assert lines[0] == "PASS  greets by name (Tomori)"
    assert "  ok   contains 'alice' (1/1)" in lines
    judged = "  ok   judge The reply stays in character as Tomori. (1/1): the judge said yes; "
    assert judged + "It stays quiet and kind, as Tomori does." in lines
    assert "FAIL  answers in ten characters (Tomori)" in lines
    assert any(line.startswith("  FAIL max_chars 10 (0/1): ") for line in lines)
    assert "2 cases: 1 passed, 1 failed, 0 errors; 3 model calls" in done.out
    suite = ElementTree.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    [failing] = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert (
        failing.get("name") == "answers in ten characters" and failing.get("classname") == "Tomori"
    )
    assert failing.find("failure").get("message") == "did not hold: max_chars 10"


async def test_every_check_holding_exits_0(llm, tmp_path):
    done = await personatest(llm, write(tmp_path, "cases.json", {"version": 1, "cases": [GREETS]}))
    assert done.code == 0, done.out + done.err
    assert "1 cases: 1 passed, 0 failed, 0 errors" in done.out


async def test_repeat_3_reports_3_results_per_check_and_keeps_the_judges_reasons(llm, tmp_path):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [GREETS]})

    done = await personatest(llm, cases, "--repeat", "3")

    assert done.code == 0, done.out + done.err
    check_lines = [line for line in done.out.splitlines() if line.startswith("  ok")]
    assert len(check_lines) == 4 and all(
        line.split(")")[0].endswith("(3/3") for line in check_lines
    )
    results = await sync_to_async(list)(PersonaTestResult.objects.order_by("repeat_index"))
    assert [r.repeat_index for r in results] == [0, 1, 2]
    for result in results:
        [judge] = [c for c in result.checks if c["kind"] == "judge"]
        assert (
            judge["passed"] is True
            and judge["reason"] == "It stays quiet and kind, as Tomori does."
        )
    judged = [b for b in llm.chat_bodies if b["messages"][0]["content"] == JUDGE_SYSTEM_PROMPT]
    assert len(judged) == 3 and len(llm.chat_bodies) == 6


async def test_a_draft_file_changes_the_request_only_where_it_differs(llm, tmp_path):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [SHORT]})
    exported = await sync_to_async(config_export)()
    [tomori] = [p for p in exported["guilds"][0]["personas"] if p["name"] == "Tomori"]
    draft = write(
        tmp_path, "draft.json", {**tomori, "system_prompt": "You are Tomori. Answer in one word."}
    )

    saved_run = await personatest(llm, cases)
    draft_run = await personatest(llm, cases, "--persona-file", draft)

    assert saved_run.code == draft_run.code == 1
    saved, drafted = llm.chat_bodies
    assert json_differences(saved, drafted) == ["messages[0].content"]
    assert drafted["messages"][0]["content"] == "You are Tomori. Answer in one word."
    assert await sync_to_async(
        lambda: list(PersonaTestRun.objects.values_list("targets", flat=True))
    )() == [
        [{"key": "draft", "label": "draft", "model": ""}],
        [{"key": "saved", "label": "saved", "model": ""}],
    ]


async def test_a_refused_file_exits_2_naming_the_path_and_runs_nothing(llm, tmp_path):
    bad = {**GREETS, "expect": {"matches": "(unclosed"}}
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [bad]})

    done = await personatest(llm, cases)

    assert done.code == 2
    assert f"{cases}: cases[0].expect.matches: is not a valid regular expression" in done.err
    assert llm.chat_bodies == []
    assert await PersonaTestRun.objects.acount() == 0
