from __future__ import annotations

import pytest

from chat.llm.capabilities import ModelCapabilities, default_capabilities, model_capabilities


@pytest.mark.parametrize(
    ("name", "vision", "prefill", "merge"),
    [
        ("gpt-4o-mini", True, False, False),
        ("openai/gpt-4.1-nano", True, False, False),
        ("claude-3-5-sonnet-latest", True, True, True),
        ("anthropic/claude-sonnet-4", True, True, True),
        ("claude-2.1", False, True, True),
        ("gemini-2.0-flash", True, False, True),
        ("llava:13b", True, False, False),
        ("llama3.2-vision:11b", True, False, False),
        ("qwen2.5-vl-7b-instruct", True, False, False),
        ("deepseek-chat", False, True, False),
        ("llama3:8b", False, False, False),
        ("gpt-3.5-turbo", False, False, False),
    ],
)
def test_capabilities_by_model_name(name: str, vision: bool, prefill: bool, merge: bool) -> None:
    assert default_capabilities(name) == ModelCapabilities(vision, prefill, merge)


def test_a_setting_overrides_the_name_and_none_keeps_it() -> None:
    assert model_capabilities("llama3:8b", vision=True) == ModelCapabilities(vision=True)
    assert model_capabilities("gpt-4o", vision=False, prefill=None).vision is False
    assert model_capabilities("claude-3-opus", merge_same_role=None).merge_same_role is True
