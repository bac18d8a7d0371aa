"""The live screens: overview, channel window, prompt preview, turn inspector, "why (not)?"
and the sandbox playground.

Function views, one template per screen; every piece that changes live is a partial that the
page, htmx responses and the websocket consumers (`dashboard.consumers`) render alike. Every
screen is for admins and moderators (`viewer_required`), of the guilds they may see: a channel,
turn or message of any other guild answers 404 (`dashboard.access`); the playground is for
operators only. None of them changes what the bot does: the preview and the replay are dry
runs.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat import selectors as chat_selectors
from chat.models import TURN_REASON_CHOICES, Turn
from chat.pipeline.types import HistoryMessage
from chat.selectors.message_trace import message_record
from chat.why import WhyAnswer, why_message
from dashboard import playground as sandbox_playground
from dashboard import selectors
from dashboard.access import (
    NOT_FOUND,
    channel_access,
    operator_required,
    request_rights,
    turn_access,
    viewer_required,
)
from dashboard.ids import parse_id
from dashboard.names import NameBook, picked_user_id
from dashboard.preview import (
    DiscordUnavailable,
    PreviewError,
    PreviewResult,
    message_fetch,
    preview_prepare,
    turn_replay,
)
from personas.models import GuildConfig, Persona

PAGE_SIZE = 25


# --- Overview ------------------------------------------------------------------------------------


# --- The live channel window ---------------------------------------------------------------------


@require_GET
@viewer_required
def channel_live(request: HttpRequest, channel_id: int) -> HttpResponse:
    """The channel's window as the bot sees it, the unread pool, loop state and planner steps;
    updated over ``/ws/channels/<id>/``."""
    channel_access(request, channel_id)
    window = selectors.channel_window(rights=request_rights(request), channel_id=channel_id)
    personas = _personas_for(window.guild)
    return render(
        request,
        "dashboard/channel_live.html",
        {
            "window": window,
            "personas": personas,
            "channel_id": channel_id,
            "reset": chat_selectors.channel_reset_marker(channel_id=channel_id),
        },
    )


# --- The prompt preview --------------------------------------------------------------------------


@require_GET
@viewer_required
def channel_preview(request: HttpRequest, channel_id: int) -> HttpResponse:
    """``?persona=<name>[&as=<user>&text=<text> | &message=<id>][&format=json]``: the exact
    request the persona would send now in answer to the channel's newest message (or if that
    user said that text now, or to that message), as a dry run. ``as`` is a user id, a member's
    name, or ``name (id)`` as the page's member list offers it."""
    channel_access(request, channel_id)
    rights = request_rights(request)
    window = selectors.channel_window(rights=rights, channel_id=channel_id)
    personas = _personas_for(window.guild)
    persona = request.GET.get("persona", "").strip() or (personas[0].name if personas else "")
    as_raw = request.GET.get("as", "").strip()
    text = request.GET.get("text", "")
    message_raw = request.GET.get("message", "").strip()
    wants_json = request.GET.get("format") == "json"
    people = selectors.channel_people(
        rights=rights,
        channel_id=channel_id,
        guild_id=window.guild.guild_id if window.guild else None,
    )
    context = {
        "channel_id": channel_id,
        "window": window,
        "personas": personas,
        "persona": persona,
        "as_user": as_raw,
        "text": text,
        "message_id": message_raw,
        "people": people,
    }
    error = None
    result = None
    message_id = parse_id(message_raw)
    as_problem = None
    try:
        as_user_id = picked_user_id(as_raw, people)
    except ValueError as problem:
        as_user_id, as_problem = None, f"“As”: {problem}"
    if as_problem:
        error = as_problem
    elif bool(as_raw) != bool(text):
        error = "Give both a user (“as”) and a text, or neither."
    elif message_raw and message_id is None:
        error = "“message” must be a message id (digits)."
    elif message_raw and as_raw:
        error = "Preview either a message or a hypothetical text, not both."
    elif persona:
        try:
            result = async_to_sync(preview_prepare)(
                channel_id=channel_id,
                persona_name=persona,
                as_user_id=as_user_id,
                text=text or None,
                trigger_message_id=message_id,
                now=timezone.now(),
            )
        except (PreviewError, DiscordUnavailable) as problem:
            error = str(problem)
    else:
        error = "No persona can speak in this channel."
    if wants_json:
        if error:
            return JsonResponse({"error": error}, status=400)
        return JsonResponse(result.as_json(), json_dumps_params={"ensure_ascii": False})
    if result is not None:
        context.update(_preview_context(result))
    context["error"] = error
    template = "dashboard/_preview_result.html" if request.htmx else "dashboard/preview.html"
    return render(request, template, context)


def _preview_context(result: PreviewResult) -> dict[str, Any]:
    """The preview template's context: the JSON shape plus what the page draws from it."""
    data = result.as_json()
    return {
        **preview_data_context(data),
        "triggered_by": result.triggered_by,
        "decision": data["decision"],
    }


def preview_data_context(data: dict[str, Any]) -> dict[str, Any]:
    """What the preview's request sections draw from the preview's JSON shape (``request``,
    ``items``, ``tokens``, ``truncation``, ``cache_prefix_end``, ``tools``): a persona test
    result's request is shown by the same template."""
    tokens = data["tokens"]
    budget = tokens["budget"] or 1
    items = data["items"]
    removed = set(data["truncation"]["removed_message_ids"])
    first_dialogue = next(
        (i for i, item in enumerate(items) if item["tag"] == "dialogue_history"), None
    )
    return {
        "preview": data,
        "items": items,
        "cut_before": first_dialogue if removed else None,
        "sections": sorted(tokens["by_tag"].items(), key=lambda kv: -kv[1]),
        "budget_percent": min(100, round(tokens["total"] * 100 / budget, 1)),
        "over_budget": tokens["total"] > tokens["budget"],
        "request_json": json.dumps(data["request"], indent=2, ensure_ascii=False),
        "removed_count": len(removed),
    }


# --- The turn inspector --------------------------------------------------------------------------


@require_GET
@viewer_required
def turn_list(request: HttpRequest) -> HttpResponse:
    """The person's turns, newest first, filtered by guild, channel, persona, status, reason
    and date."""
    rights = request_rights(request)
    filters = selectors.TurnFilters(
        guild=parse_id(request.GET.get("guild")),
        channel=parse_id(request.GET.get("channel")),
        persona=request.GET.get("persona", "").strip(),
        status=request.GET.get("status", ""),
        reason=request.GET.get("reason", ""),
        since=_date(request.GET.get("since")),
        until=_date(request.GET.get("until")),
    )
    turns = selectors.turns_filtered(filters=filters, rights=rights)
    page = Paginator(turns, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "dashboard/turn_list.html",
        {
            "page": page,
            "filters": filters,
            "query": query.urlencode(),
            "guilds": selectors.guild_filter_choices(rights=rights),
            "channels": selectors.turn_channel_ids(rights=rights),
            "statuses": Turn.Status.choices,
            "reasons": TURN_REASON_CHOICES,
            "personas": selectors.persona_name_choices(rights=rights),
        },
    )


@require_GET
@viewer_required
def turn_detail(request: HttpRequest, turn_id: int) -> HttpResponse:
    """One turn as a trace: why it ran, its window and context items, the exact request,
    each attempt, the reply and its messages, timings and tokens; and the replay form."""
    turn = turn_access(request, turn_id)
    return render(request, "dashboard/turn.html", _turn_context(request, turn))


@require_GET
@viewer_required
def turn_withheld(request: HttpRequest, turn_id: int) -> HttpResponse:
    """What moderation kept from Discord on the turn (the flagged texts and the reply as the
    model wrote it): shown only when a moderator asks, never on the turn page itself (a turn
    that withheld nothing says so). Answers the partial to htmx, the page otherwise."""
    turn = turn_access(request, turn_id)
    context = {"turn": turn, "withheld": selectors.withheld_texts(turn=turn)}
    if request.htmx:
        return render(request, "dashboard/_turn_withheld.html", context)
    return render(request, "dashboard/turn_withheld.html", context)


@require_POST
@viewer_required
def turn_replay_view(request: HttpRequest, turn_id: int) -> HttpResponse:
    """Replay the turn as another persona and/or model, as a dry run (never delivered; the
    model is asked only when ``ask_model`` is checked). Answers the replay partial. The
    personas it may be replayed as are its channel's (`preview_prepare` finds no other)."""
    turn = turn_access(request, turn_id)
    persona = request.POST.get("persona", "").strip() or turn.persona_name
    model = request.POST.get("model", "").strip()
    ask_model = request.POST.get("ask_model") in ("on", "1", "true")
    context: dict[str, Any] = {"turn": turn}
    try:
        context["replay"] = async_to_sync(turn_replay)(
            turn=turn, persona_name=persona, model=model, ask_model=ask_model, now=timezone.now()
        )
    except (PreviewError, DiscordUnavailable) as problem:
        context["replay_error"] = str(problem)
    if request.htmx:
        return render(request, "dashboard/_replay_result.html", context)
    return render(request, "dashboard/turn.html", {**_turn_context(request, turn), **context})


def _turn_context(request: HttpRequest, turn: Turn) -> dict[str, Any]:
    detail = turn.reason_detail or {}
    guild_personas = selectors.turn_personas(rights=request_rights(request), turn=turn)
    return {
        "turn": turn,
        "reason_json": json.dumps(detail, indent=2, ensure_ascii=False),
        "request_json": json.dumps(turn.request, indent=2, ensure_ascii=False),
        "attempts": turn.attempts,
        "moderation_checks": selectors.moderation_checks(turn=turn),
        "has_withheld": selectors.withheld_texts(turn=turn) is not None,
        "timings": selectors.turn_timings(turn=turn),
        "participant_reads": selectors.turn_participant_reads(turn=turn),
        "entries": selectors.window_entries(turn=turn),
        "left_out": (turn.window or {}).get("left_out", []),
        "items": turn.context_items,
        "cache_prefix_end": turn.cache_prefix_end,
        "personas": guild_personas,
        "delivered": [
            {"id": i, "url": _message_url(turn.guild_id, turn.channel_id, i)}
            for i in turn.delivered_message_ids
        ],
        "trigger_url": _message_url(turn.guild_id, turn.channel_id, turn.trigger_message_id),
    }


def _message_url(guild_id: int | None, channel_id: int, message_id) -> str:
    if message_id is None:
        return ""
    return f"https://discord.com/channels/{guild_id or '@me'}/{channel_id}/{message_id}"


# --- Why (not)? ----------------------------------------------------------------------------------


@require_GET
@viewer_required
def why_view(request: HttpRequest) -> HttpResponse:
    """``?message=<id>[&format=json]``: each persona's answer to "did you reply, and why
    (not)?". A message of a guild the person has no right in answers 404, as one nothing is
    recorded of does for anyone but an operator."""
    rights = request_rights(request)
    raw = request.GET.get("message", "").strip()
    answer = error = None
    if raw:
        message_id = parse_id(raw)
        if message_id is not None:
            _message_access(request, message_id)
            answer = why_message(
                message_id=message_id,
                bot_user_id=selectors.bot_user_id(),
                now=timezone.now(),
                fetch=_fetch_over_rest,
            )
        else:
            error = "A message id is digits (in Discord: right-click → Copy Message ID)."
    if request.GET.get("format") == "json":
        if answer is None:
            return JsonResponse({"error": error or "Give ?message=<id>."}, status=400)
        return JsonResponse(_why_json(answer), json_dumps_params={"ensure_ascii": False})
    return render(
        request,
        "dashboard/why.html",
        {
            "message_id": raw,
            "answer": answer,
            "error": error,
            "recent": selectors.recent_messages(rights=rights),
        },
        status=400 if error else 200,
    )


def _message_access(request: HttpRequest, message_id: int) -> None:
    """Http404 unless the person may see the message's channel (its guild, or for a direct
    message the guild of the persona answering it); operators see any message, recorded or
    not."""
    rights = request_rights(request)
    if rights.unrestricted:
        return
    record = message_record(message_id=message_id)
    if record.channel_id is None or not selectors.may_view_channel(
        rights=rights, channel_id=record.channel_id
    ):
        raise Http404(NOT_FOUND)


def _why_json(answer: WhyAnswer) -> dict[str, Any]:
    """The why answer as JSON: per persona whether it replied, why, and the trigger
    decision's verdict (``answers``: the rules would have it answer; ``silence``: why not)."""
    return {
        "message_id": str(answer.record.message_id),
        "channel_id": str(answer.record.channel_id) if answer.record.channel_id else None,
        "summary": answer.summary,
        "answers": [
            {
                "persona": a.persona,
                "replied": a.replied,
                "why": a.why,
                "rule": a.rule,
                "turn_ids": [t.pk for t in a.turns],
                "verdict": None
                if a.verdict is None
                else {
                    "answers": a.verdict.answers,
                    "rule": str(a.verdict.addressed.reason) if a.verdict.addressed else None,
                    "silence": str(a.verdict.silence) if a.verdict.silence else None,
                },
            }
            for a in answer.answers
        ],
    }


def _playground_command(
    request: HttpRequest, world: dict[str, Any], channel_id: int | None, author_id: int | None
) -> HttpResponse:
    """Run the typed slash command as the demo user; the bot's answer is shown to them alone,
    as Discord shows an ephemeral answer: in place with htmx, else on the page."""
    answer = error = None
    try:
        if author_id is None or channel_id is None:
            raise ValueError("choose a channel and a user")
        name, options, target = sandbox_playground.parse_command(request.POST["command"])
        answer = async_to_sync(sandbox_playground.run_command)(
            settings.DISCORD_API_BASE,
            channel_id,
            author_id,
            name,
            options,
            target_message_id=target,
        )
        if not answer["answered"]:
            error = f"/{name}: the bot did not answer within 5 seconds (is the worker running?)"
    except (ValueError, sandbox_playground.SandboxUnavailable) as problem:
        error = str(problem)
    context = {"command_answer": answer, "command_error": error}
    if request.htmx:
        return render(request, "dashboard/_playground_command_answer.html", context)
    rights = request_rights(request)
    window = selectors.channel_window(rights=rights, channel_id=channel_id) if channel_id else None
    return render(
        request,
        "dashboard/playground.html",
        {
            "world": world,
            "channels": sandbox_playground.channels(world),
            "users": sandbox_playground.users(world),
            "channel_id": channel_id,
            "author_id": author_id,
            "window": window,
            "command_text": request.POST["command"],
            **context,
            **(_playground_chat_context(channel_id) if channel_id else {}),
        },
        status=400 if error else 200,
    )


def _fetch_over_rest(channel_id: int, message_id: int) -> HistoryMessage | None:
    return async_to_sync(message_fetch)(channel_id=channel_id, message_id=message_id)


# --- Playground ----------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@operator_required
def playground(request: HttpRequest) -> HttpResponse:
    """A sandbox channel as a conversation: its messages as a chat (each with its author,
    avatar and time; persona replies arrive live over ``/ws/playground/<id>/``), a box to type
    as a demo user, and beside them the window the bot saw and its turns. Only while the
    sandbox runs (it answers at ``DISCORD_API_BASE``'s host); otherwise the page says so and a
    POST answers 404.

    A POST without htmx answers with a redirect back to the channel (the new message is then
    in the chat); with htmx it answers the status line and the chat, swapped in place."""
    world = async_to_sync(sandbox_playground.sandbox_world)(settings.DISCORD_API_BASE)
    if world is None:
        if request.method == "POST":
            raise Http404("the sandbox is not running")
        return render(request, "dashboard/playground.html", {"world": None})
    channels = sandbox_playground.channels(world)
    users = sandbox_playground.users(world)
    channel_id = parse_id(request.POST.get("channel") or request.GET.get("channel"))
    channel_id = channel_id or (channels[0][0] if channels else None)
    author_id = parse_id(request.POST.get("author") or request.GET.get("as"))
    sent = error = None
    if request.method == "POST" and "command" in request.POST:
        return _playground_command(request, world, channel_id, author_id)
    if request.method == "POST":
        content = request.POST.get("content", "").strip()
        if author_id is None or channel_id is None or not content:
            error = "Choose a channel and a user, and type something."
        else:
            try:
                sent = async_to_sync(sandbox_playground.say)(
                    settings.DISCORD_API_BASE, channel_id, author_id, content
                )
            except sandbox_playground.SandboxUnavailable as problem:
                error = str(problem)
        if request.htmx:
            context = {"sent": sent, "error": error}
            if sent is not None:
                context.update(_playground_chat_context(channel_id, oob=True))
            html = render_to_string("dashboard/_playground_sent.html", context, request)
            if sent is not None:
                html += render_to_string("dashboard/_playground_chat.html", context, request)
            return HttpResponse(html)
        if error is None:
            query = urlencode({"channel": channel_id, "as": author_id})
            return redirect(f"{reverse('dashboard:playground')}?{query}#playground-chat")
    rights = request_rights(request)
    window = selectors.channel_window(rights=rights, channel_id=channel_id) if channel_id else None
    return render(
        request,
        "dashboard/playground.html",
        {
            "world": world,
            "channels": channels,
            "users": users,
            "channel_id": channel_id,
            "author_id": author_id,
            "window": window,
            "sent": sent,
            "error": error,
            **(_playground_chat_context(channel_id) if channel_id else {}),
        },
        status=400 if error else 200,
    )


def _playground_chat_context(channel_id: int, *, oob: bool = False) -> dict[str, Any]:
    """The chat partial's context: the conversation and the channel's name."""
    return {
        "chat": async_to_sync(sandbox_playground.playground_chat)(channel_id=channel_id),
        "channel_title": NameBook().channel(channel_id).text,
        "oob": oob,
    }


# --- helpers -------------------------------------------------------------------------------------


def _personas_for(guild: GuildConfig | None) -> list[Persona]:
    return selectors.speaking_personas(guild=guild) if guild is not None else []


def _date(value: str | None) -> dt.date | None:
    try:
        return dt.date.fromisoformat(value) if value else None
    except ValueError:
        return None
