"""The persona page sets a text-completion model: its API, its instruct template (a name or a
SillyTavern preset's JSON) and fallback models that name their API, and keeps them."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from dashboard.tests.test_views import persona_post
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

FALLBACKS = [{"model": "llama", "api": "completions", "instruct_template": "mistral"}, "gpt-4o"]


def test_a_text_completion_model_is_set_and_kept(guild, admin_client):
    admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]),
        persona_post(
            llm_api="completions",
            instruct_template=json.dumps({"name": "Mine", "input_sequence": "U:"}),
            fallback_models=json.dumps(FALLBACKS),
        ),
    )
    rikki = Persona.objects.get(name="Rikki")
    assert rikki.llm_api == "completions"
    assert rikki.instruct_template["input_sequence"] == "U:"
    assert rikki.fallback_models[0]["instruct_template"] == "mistral"
    assert rikki.fallback_models[1] == "gpt-4o"

    page = admin_client.get(reverse("dashboard:persona", args=[guild.guild_id, rikki.pk]))
    form = page.context["form"]
    data = persona_post(
        llm_api=form["llm_api"].value(),
        instruct_template=form["instruct_template"].value(),
        fallback_models=form["fallback_models"].value(),
        system_prompt="Changed.",
    )
    admin_client.post(reverse("dashboard:persona", args=[guild.guild_id, rikki.pk]), data)
    rikki.refresh_from_db()
    assert rikki.system_prompt == "Changed." and rikki.llm_api == "completions"
    assert rikki.fallback_models[0]["api"] == "completions"


def test_a_template_without_the_completions_api_is_refused_inline(guild, admin_client):
    response = admin_client.post(
        reverse("dashboard:persona_new", args=[guild.guild_id]),
        persona_post(instruct_template="llama3"),
    )
    assert response.status_code == 400
    assert response.context["form"].errors["instruct_template"] == [
        'applies only with "api": "completions"'
    ]
