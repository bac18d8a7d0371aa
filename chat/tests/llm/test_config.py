"""The deployment's model settings are read when asked for, not at import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from pytest_django.fixtures import Settings

from chat.llm.base import ChatRequest, ModelSpec
from chat.llm.config import client_from_settings, persona_model_specs
from chat.llm.fake_server import FakeLLMServer
from personas.models import Persona

PROJECT_ROOT = Path(__file__).resolve().parents[3]


async def test_client_uses_the_base_url_and_key_configured_at_call_time(
    fake_server: FakeLLMServer, settings: Settings
) -> None:
    settings.LLM_BASE_URL = fake_server.base_url
    settings.LLM_API_KEY = "key-from-settings"

    async with client_from_settings() as client:
        request = ChatRequest(ModelSpec("m"), [{"role": "user", "content": "hi"}])
        completion = await client.complete(request)

    assert completion.text == "I am the fake model m. You said: hi"
    assert fake_server.requests[0].headers["Authorization"] == "Bearer key-from-settings"


def test_an_empty_base_url_is_named_in_the_error(settings: Settings) -> None:
    settings.LLM_BASE_URL = ""

    with pytest.raises(ImproperlyConfigured, match="LLM_BASE_URL"):
        client_from_settings()


def test_persona_models_are_its_model_then_its_fallbacks_without_blanks_or_repeats(
    settings: Settings,
) -> None:
    settings.LLM_MODEL = "deployment-model"
    persona = Persona(
        name="Tomori",
        llm_model="",
        fallback_models=["backup", " ", "deployment-model", "backup", "last"],
        temperature=0.2,
        max_output_tokens=300,
    )

    specs = persona_model_specs(persona, stop=("\nAnn:",))

    assert [spec.name for spec in specs] == ["deployment-model", "backup", "last"]
    assert {(s.temperature, s.max_output_tokens, s.stop) for s in specs} == {
        (0.2, 300, ("\nAnn:",))
    }
    assert not any(spec.supports_vision or spec.supports_prefill for spec in specs)


def test_a_persona_model_overrides_the_deployment_default(settings: Settings) -> None:
    settings.LLM_MODEL = "deployment-model"
    persona = Persona(name="Tomori", llm_model="own-model", fallback_models=[])

    assert [spec.name for spec in persona_model_specs(persona)] == ["own-model"]


def test_model_access_outside_config_and_recording_imports_without_django() -> None:
    modules = ["base", "openai_compat", "attempts", "reply", "tools", "fake_server"]
    imports = "; ".join(f"import chat.llm.{module}" for module in modules)
    check = f"import sys; {imports}; sys.exit('django' in sys.modules)"
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    finished = subprocess.run(
        [sys.executable, "-c", check], cwd=PROJECT_ROOT, env=environment, check=False
    )

    assert finished.returncode == 0
