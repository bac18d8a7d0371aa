"""`manage.py personatest` refuses bad files before anything runs: each problem named by its
file and JSON path, exit status 2, no run recorded, no model asked (``LLM_BASE_URL`` points
nowhere here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from chat.models import PersonaTestRun
from chat.tests.e2e.conftest import DEMO_CONFIG
from personas.selectors import config_export
from personas.services import config_import

GREETS = {
    "name": "greets by name",
    "guild": "1191168914227200002",
    "persona": "Tomori",
    "message": {"author": "alice", "content": "tomori, do you remember me?"},
}


@pytest.fixture
def demo(db, settings):
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"  # nothing answers there
    config_import(data=json.loads(DEMO_CONFIG.read_text()))


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        call_command("personatest", *args)
    assert raised.value.returncode == 2
    assert PersonaTestRun.objects.count() == 0
    return str(raised.value)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"expect": {"matches": "(unclosed"}}, "cases[0].expect.matches: is not a valid regular"),
        ({"expect": {"judge": " "}}, "cases[0].expect.judge: is empty"),
        ({"persona": "Nobody"}, "cases[0].persona: names no persona of Sandbox Café: 'Nobody'"),
        ({"guild": "42"}, "cases[0].guild: no configured guild has the id 42"),
        (
            {"history": [{"author": "bob", "content": "x"}] * 101},
            "cases[0].history: List should have at most 100 items",
        ),
    ],
)
def test_a_bad_case_is_refused_by_file_and_path(demo, tmp_path, change, expected):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [{**GREETS, **change}]})
    assert f"{cases}: {expected}" in refused(cases)


def test_a_file_that_is_not_json_is_refused(demo, tmp_path):
    cases = write(tmp_path, "cases.json", "{not json")
    assert f"{cases}: (document): is not valid JSON" in refused(cases)


def test_a_missing_file_is_refused(demo, tmp_path):
    assert "(document): cannot be read: No such file or directory" in refused(
        str(tmp_path / "absent.json")
    )


def test_a_bad_draft_names_its_field(demo, tmp_path):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [GREETS]})
    draft = write(tmp_path, "draft.json", {"name": "Tomori", "llm": {"temperature": 9}})
    message = refused(cases, "--persona-file", draft)
    assert f"{draft}: llm.temperature: Input should be less than or equal to 2" in message


def test_a_draft_of_a_persona_no_case_names_is_refused(demo, tmp_path):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [GREETS]})
    [anon] = [p for p in config_export()["guilds"][0]["personas"] if p["name"] == "Anon"]
    draft = write(tmp_path, "draft.json", anon)
    assert f"{draft}: name: no case of {cases} is of a persona named 'Anon'" in refused(
        cases, "--persona-file", draft
    )


def test_repeat_out_of_range_is_refused(demo, tmp_path):
    cases = write(tmp_path, "cases.json", {"version": 1, "cases": [GREETS]})
    assert "repeat must be from 1 to 20, got 21" in refused(cases, "--repeat", "21")
