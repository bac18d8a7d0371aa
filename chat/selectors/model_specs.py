"""The models a persona's turn and an autonomous channel's planner ask, as configured."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings

from chat.llm.base import ModelApi, ModelSpec
from chat.llm.capabilities import model_capabilities
from chat.pipeline.instruct import (
    BUILTIN_TEMPLATES,
    DEFAULT_TEMPLATE,
    InstructTemplate,
    instruct_template_from_preset,
)
from personas.models import Persona

if TYPE_CHECKING:
    from chat.selectors import ChannelConfiguration


def persona_model_specs(*, persona: Persona, stop: tuple[str, ...] = ()) -> tuple[ModelSpec, ...]:
    """The models to try for ``persona``, in order: its model (``LLM_MODEL`` when it names none),
    then its fallback models; blanks and repeats dropped.

    Every spec carries the persona's temperature and output limit. Whether a model takes
    images, a prefill, or needs one role's messages merged is decided by its name
    (`chat.llm.capabilities`); the persona's own settings (``llm_vision``, ``llm_prefill``,
    ``llm_merge_same_role``, None = by name) override that for its first model only (the
    fallbacks are other models, judged by their names). Each model is asked through its API:
    the persona's ``llm_api`` for its model, a fallback's own (``chat`` for a bare name); a
    text-completion model with its instruct template (`chat.pipeline.instruct`).
    """
    wanted = [
        (persona.llm_model or settings.LLM_MODEL, persona.llm_api, persona.instruct_template, None)
    ]
    for fallback in persona.fallback_models:
        if isinstance(fallback, str):
            wanted.append((fallback, "chat", None, None))
        else:
            wanted.append(
                (
                    fallback["model"],
                    fallback.get("api", "chat"),
                    fallback.get("instruct_template"),
                    fallback.get("context_window"),
                )
            )
    unique = {
        (name.strip(), api): (template, window)
        for name, api, template, window in wanted
        if name.strip()
    }
    specs = []
    for index, ((name, api), (template, window)) in enumerate(unique.items()):
        overrides = (
            {
                "vision": persona.llm_vision,
                "prefill": persona.llm_prefill,
                "merge_same_role": persona.llm_merge_same_role,
            }
            if index == 0
            else {}
        )
        capabilities = model_capabilities(name, **overrides)
        text_model = api == ModelApi.COMPLETIONS
        specs.append(
            ModelSpec(
                name,
                supports_vision=capabilities.vision and not text_model,
                supports_prefill=capabilities.prefill,
                merge_same_role=capabilities.merge_same_role,
                temperature=persona.temperature,
                max_output_tokens=persona.max_output_tokens,
                stop=stop,
                api=ModelApi(api),
                instruct=instruct_template(stored=template) if text_model else None,
                context_window=window,
                asks_cost=endpoint_reports_cost(base_url=settings.LLM_BASE_URL),
            )
        )
    return tuple(specs)


COST_REPORTING_HOSTS = ("openrouter.ai",)
"""Endpoints that report a call's cost when asked (``"usage": {"include": true}``); other
OpenAI-compatible servers may refuse the unknown key, so it is sent only to these."""


def endpoint_reports_cost(*, base_url: str) -> bool:
    """Whether the endpoint at ``base_url`` is one that reports each call's cost."""
    host = (urlsplit(base_url).hostname or "").lower()
    return any(host == known or host.endswith("." + known) for known in COST_REPORTING_HOSTS)


def planner_model_specs(*, configuration: ChannelConfiguration) -> tuple[ModelSpec, ...]:
    """The models the planner of an autonomous channel asks: the guild's ``planner_model``,
    else the deployment's ``LLM_PLANNER_MODEL`` (each with the main persona's temperature and
    output limit), else the main persona's own models (`persona_model_specs`)."""
    main = configuration.personas[0]
    guild = configuration.settings.guild
    name = (guild.planner_model if guild is not None else "") or settings.LLM_PLANNER_MODEL
    if not name.strip():
        return persona_model_specs(persona=main)
    capabilities = model_capabilities(name.strip())
    return (
        ModelSpec(
            name.strip(),
            supports_vision=capabilities.vision,
            supports_prefill=capabilities.prefill,
            merge_same_role=capabilities.merge_same_role,
            temperature=main.temperature,
            max_output_tokens=main.max_output_tokens,
            asks_cost=endpoint_reports_cost(base_url=settings.LLM_BASE_URL),
        ),
    )


def instruct_template(*, stored: str | dict | None) -> InstructTemplate:
    """A stored instruct template: a built-in's name, or an imported SillyTavern preset;
    None (or an unknown name) is `DEFAULT_TEMPLATE`."""
    if isinstance(stored, dict):
        return instruct_template_from_preset(stored)
    return BUILTIN_TEMPLATES.get(stored or DEFAULT_TEMPLATE, BUILTIN_TEMPLATES[DEFAULT_TEMPLATE])
