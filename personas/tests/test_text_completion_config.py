"""A persona's text-completion model in the configuration file: ``llm.api``,
``llm.instruct_template`` (a built-in's name or a SillyTavern instruct preset), and fallback
models that name their API."""

from __future__ import annotations

import pytest

from chat.llm.base import ModelApi
from chat.selectors import persona_model_specs
from personas.config_schema import ConfigError, parse_config_document
from personas.models import Persona
from personas.selectors import config_export
from personas.services import config_import

PRESET = {"name": "Mine", "input_sequence": "USER:", "output_sequence": "BOT:", "macro": True}


def _document(**llm) -> dict:
    return {
        "version": 1,
        "guilds": [
            {"id": "1500000000000000001", "name": "G", "personas": [{"name": "Rana", "llm": llm}]}
        ],
    }


def test_api_template_and_mixed_fallbacks_round_trip(db):
    document = _document(
        model="local",
        api="completions",
        instruct_template=PRESET,
        fallback_models=[
            "gpt-4o-mini",
            {"model": "llama", "api": "completions", "instruct_template": "llama3"},
        ],
    )
    config_import(data=document)
    exported = config_export()
    llm = exported["guilds"][0]["personas"][0]["llm"]
    assert llm["api"] == "completions" and llm["instruct_template"]["macro"] is True
    assert llm["fallback_models"][0] == "gpt-4o-mini"
    assert llm["fallback_models"][1]["instruct_template"] == "llama3"
    assert not config_import(data=exported).changed

    specs = persona_model_specs(persona=Persona.objects.get())
    assert [(s.name, s.api) for s in specs] == [
        ("local", ModelApi.COMPLETIONS),
        ("gpt-4o-mini", ModelApi.CHAT),
        ("llama", ModelApi.COMPLETIONS),
    ]
    assert specs[0].instruct.input_sequence == "USER:" and specs[1].instruct is None
    assert specs[2].instruct.name == "llama3"
    assert not specs[0].supports_vision  # a text-completion prompt holds no images


@pytest.mark.parametrize(
    ("llm", "path", "words"),
    [
        ({"api": "text"}, "llm.api", "'chat' or 'completions'"),
        ({"api": "completions", "instruct_template": "vicuna"}, "llm.instruct_template", "chatml"),
        ({"instruct_template": "chatml"}, "llm.instruct_template", '"api": "completions"'),
        ({"fallback_models": [{"model": "x", "api": "fax"}]}, "llm.fallback_models[0].api", "chat"),
        ({"fallback_models": ["x" * 201]}, "llm.fallback_models[0]", "at most 200"),
        (
            {"api": "completions", "instruct_template": {"wrap": "maybe"}},
            "llm.instruct_template.wrap",
            "boolean",
        ),
    ],
)
def test_a_bad_model_setting_names_its_path(llm, path, words):
    with pytest.raises(ConfigError) as error:
        parse_config_document(_document(**llm))
    where = f"guilds[0].personas[0].{path}"
    assert any(p == where and words in m for p, m in error.value.problems), error.value.problems
