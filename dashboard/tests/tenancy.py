"""Two guilds and a person who administers one of them, and the walk over every route of the
project that asks each for the other guild's objects (`route_leaks`, `socket_leaks`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.views.static import serve

from accounts.models import GuildRole
from accounts.tests.people import client_of, discord_person
from chat.models import (
    DoctorReport,
    Document,
    EventQueue,
    Memory,
    PersonaTestResult,
    PersonaTestRun,
    Turn,
    UnreadEvent,
)
from chat.pipeline.going_live import Check
from personas.models import Block, GuildConfig, Persona
from personas.models_cases import PersonaTestCase
from personas.services import config_import

GUILD_A = 1100000000000000101
GUILD_B = 1100000000000000202
CHANNEL_A, CHANNEL_B = 1200000000000000101, 1200000000000000202
DM_CHANNEL = 1200000000000000303
PERSON = 1300000000000000777
USER_A, USER_B = 1300000000000000101, 1300000000000000202
MESSAGE_A, MESSAGE_B, MESSAGE_DM = 1400000000000000101, 1400000000000000202, 1400000000000000303

SECRETS = (
    "Owlette",
    "B-ONLY deployment line",
    "Night Owls Lodge",
    "B-ONLY reply",
    "B-ONLY message",
    "B-ONLY memory",
    "b-only-rules.md",
    "B-ONLY DM reply",
)
"""What guild B holds that no page may show a person without a right in it."""

NOT_GUILD_DATA = {
    "login": "the staff login form",
    "logout": "logging out",
    "discord_login": "starts Log in with Discord",
    "discord_callback": "Discord's redirect back; checks its state first",
    "dashboard:healthz": "liveness: answers {status: ok} and nothing else",
    "dashboard:token_count": "counts the tokens of the posted text",
    "dashboard:sample_row": "an empty form row",
    "dashboard:avatar_preview": "an <img> of the URL typed",
    "dashboard:lorebook_test": "activates the posted lorebook on the posted lines",
    "dashboard:deployment_check": "queues a deployment check; the card it answers is a list",
}
"""Routes that hold nothing of any guild, and why. Django's admin (``admin:``) is for staff
only: anyone else is sent to its login page."""

OPERATOR_ONLY = {"dashboard:playground", "dashboard:guild_new", "dashboard:usage_all", "metrics"}
"""Screens only operators open: everyone else gets 403, whatever the object."""

LISTS = {
    "dashboard:index",
    "dashboard:deployment",
    "dashboard:turn_list",
    "dashboard:why",
    "dashboard:config_export",
    "dashboard:config_import",
}
"""Routes of no one object: they answer, showing the person's guilds only (`SECRETS` never)."""

QUERY_OBJECTS = {"dashboard:why": {"message": str(MESSAGE_B)}}
"""Routes that name their object in the query string: asked for guild B's, they answer 404."""

LIST_QUERIES = {"dashboard:turn_list": f"?guild={GUILD_B}&channel={CHANNEL_B}&persona=Owlette"}


@dataclass
class Tenancy:
    """Guild A (administered by the person) and guild B (not theirs), with rows of every kind;
    ``a`` and ``b`` fill each route parameter with that guild's object."""

    person: Any
    client: Client
    a: dict[str, object] = field(default_factory=dict)
    b: dict[str, object] = field(default_factory=dict)


def _guild_document(guild_id: int, name: str, persona: str, channel: int, user: int) -> dict:
    return {
        "id": str(guild_id),
        "name": name,
        "personas": [{"name": persona, "main": True, "system_prompt": f"You are {persona}."}],
        "channels": [{"id": str(channel), "mode": "reactive"}],
        "blocks": [{"persona": persona, "user_id": str(user), "type": "mute"}],
        "users": [{"id": str(user), "privacy": "partial"}],
    }


def two_guilds() -> Tenancy:
    """Guild A and guild B configured, each with a turn, a message waiting, a memory and a
    document; a DM turn answered by B's persona; the person: admin of A alone."""
    config_import(
        data={
            "version": 1,
            "guilds": [
                _guild_document(GUILD_A, "Day Larks Club", "Larkin", CHANNEL_A, USER_A),
                _guild_document(GUILD_B, "Night Owls Lodge", "Owlette", CHANNEL_B, USER_B),
            ],
        }
    )
    values = {}
    for key, guild_id, channel, user, message, persona_name in (
        ("a", GUILD_A, CHANNEL_A, USER_A, MESSAGE_A, "Larkin"),
        ("b", GUILD_B, CHANNEL_B, USER_B, MESSAGE_B, "Owlette"),
    ):
        persona = Persona.objects.get(name=persona_name)
        word = "A-ONLY" if key == "a" else "B-ONLY"
        turn = Turn.objects.create(
            guild_id=guild_id,
            channel_id=channel,
            persona=persona,
            persona_name=persona_name,
            reason="mention",
            status=Turn.Status.REPLIED,
            trigger_message_id=message,
            reply_text=f"{word} reply",
        )
        event = {
            "id": message,
            "content": f"{word} message",
            "author": {"id": user + 5, "display_name": "someone"},
        }
        EventQueue.objects.create(
            channel_id=channel, message_id=message, guild_id=guild_id, event=event
        )
        UnreadEvent.objects.create(
            channel_id=channel,
            message_id=message + 1,
            guild_id=guild_id,
            author_id=user + 5,
            event={**event, "id": message + 1},
        )
        memory = Memory.objects.create(
            guild_id=guild_id, kind="guild", text=f"{word} memory", source="admin"
        )
        document = Document.objects.create(
            guild_id=guild_id,
            name=f"{word.lower()}-rules.md",
            content_type="markdown",
            size=5,
            text="Rules",
        )
        case = PersonaTestCase.objects.create(
            persona=persona,
            name=f"{word} case",
            spec={"name": f"{word} case", "message": {"author": "someone", "content": "hi"}},
        )
        run = PersonaTestRun.objects.create(
            guild_id=guild_id, persona=persona, persona_name=persona_name, origin="dashboard"
        )
        result = PersonaTestResult.objects.create(
            run=run,
            case=case,
            case_name=case.name,
            persona_name=persona_name,
            target="saved",
            prompt_record={
                "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                "items": [],
                "tokens": {"total": 1, "budget": 1000, "by_tag": {}, "counter": "o200k"},
                "truncation": {
                    "batches": 0,
                    "removed_entries": 0,
                    "removed_message_ids": [],
                    "warning": None,
                },
            },
        )
        values[key] = {
            "case_id": case.pk,
            "run_id": run.pk,
            "result_id": result.pk,
            "guild_id": guild_id,
            "persona_id": persona.pk,
            "channel_id": channel,
            "block_id": Block.objects.get(guild__guild_id=guild_id).pk,
            "user_id": user,
            "turn_id": turn.pk,
            "memory_id": memory.pk,
            "document_id": document.pk,
            "fmt": "json",
        }
    dm = Turn.objects.create(
        guild_id=None,
        channel_id=DM_CHANNEL,
        persona=Persona.objects.get(name="Owlette"),
        persona_name="Owlette",
        reason="dm",
        status=Turn.Status.REPLIED,
        trigger_message_id=MESSAGE_DM,
        reply_text="B-ONLY DM reply",
    )
    values["b"]["dm_turn_id"] = dm.pk
    DoctorReport.objects.create(
        origin=DoctorReport.Origin.SCHEDULE,
        ok=False,
        checks=[
            Check(f"#{name}", False, f"{word} deployment line", guild, channel).as_json()
            for name, word, guild, channel in (
                ("larks", "A-ONLY", GUILD_A, CHANNEL_A),
                ("owls", "B-ONLY", GUILD_B, CHANNEL_B),
            )
        ],
    )
    person = discord_person(PERSON, {GUILD_A: GuildRole.ADMIN}, name="Ada of A")
    return Tenancy(person=person, client=client_of(person), a=values["a"], b=values["b"])


@dataclass(frozen=True)
class Route:
    route: str
    name: str
    callback: Any = None

    @property
    def serves_uploads(self) -> bool:
        """Development's uploaded files (``static()`` of ``MEDIA_URL``, added while DEBUG is
        on): files by their path, no guild's record; production serves them elsewhere."""
        return self.callback is serve

    @property
    def parameters(self) -> list[str]:
        return re.findall(r"<(?:\w+:)?(\w+)>", self.route)

    def path(self, values: Mapping[str, object]) -> str:
        return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), self.route)


def every_route(urlconf: str | None = None) -> Iterator[Route]:
    """Every URL pattern of the project (``urlconf``: another one), with its full route."""

    def walk(patterns: list, prefix: str, namespace: str) -> Iterator[Route]:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                yield from walk(entry.url_patterns, prefix + str(entry.pattern), inner)
            elif isinstance(entry, URLPattern):
                yield Route(
                    prefix + str(entry.pattern), namespace + (entry.name or ""), entry.callback
                )

    yield from walk(get_resolver(urlconf).url_patterns, "", "")


def route_leaks(tenancy: Tenancy, urlconf: str | None = None) -> list[str]:
    """Every way a route answers the person for guild B other than "not found": one line
    each. A route whose parameter the walk cannot fill is a problem too (name its value)."""
    problems = []
    client = tenancy.client
    for route in every_route(urlconf):
        if route.name.startswith("admin:") or route.name in NOT_GUILD_DATA or route.serves_uploads:
            continue
        if route.name in OPERATOR_ONLY:
            answers = _answers(client, route.path(tenancy.b | {"channel_id": CHANNEL_B}))
            if any(status not in (403, 405) for status in answers.values()):
                problems.append(f"{route.name}: {answers} for a person (operators only: 403)")
            continue
        if route.name in LISTS:
            problems += _list_leaks(client, route)
        missing = [p for p in route.parameters if p not in tenancy.b]
        if missing:
            problems.append(f"{route.name}: no guild-B value for {missing} (add one)")
            continue
        if not route.parameters and route.name not in QUERY_OBJECTS:
            if route.name not in LISTS:
                problems.append(f"{route.name}: no object in its path: a list? say so")
            continue
        query = QUERY_OBJECTS.get(route.name, {})
        answers = _answers(client, route.path(tenancy.b), query)
        if not answers or any(status != 404 for status in answers.values()):
            problems.append(f"{route.name}: {answers} for guild B's {route.path(tenancy.b)}")
        others = [p for p in route.parameters if p not in ("guild_id", "fmt")]
        if "guild_id" in route.parameters and others:
            mixed = tenancy.b | {"guild_id": tenancy.a["guild_id"]}
            answers = _answers(client, route.path(mixed), query)
            if any(status != 404 for status in answers.values()):
                problems.append(f"{route.name}: {answers} for guild B's {others} under guild A")
        if route.name == "dashboard:turn":
            dm = _answers(client, route.path(tenancy.b | {"turn_id": tenancy.b["dm_turn_id"]}))
            if dm.get("GET") != 404:
                problems.append(f"{route.name}: {dm} for a DM turn of guild B's persona")
    return problems


def _answers(client: Client, path: str, query: Mapping[str, str] | None = None) -> dict[str, int]:
    """The status of each method the route takes (405: it does not)."""
    answers = {}
    get = client.get(path, query or {})
    if get.status_code != 405:
        answers["GET"] = get.status_code
    post = client.post(path + (f"?{_query(query)}" if query else ""), {"name": "Hijacked"})
    if post.status_code != 405:
        answers["POST"] = post.status_code
    return answers


def _query(query: Mapping[str, str]) -> str:
    return "&".join(f"{k}={v}" for k, v in query.items())


def _list_leaks(client: Client, route: Route) -> list[str]:
    response = client.get(route.path({}) + LIST_QUERIES.get(route.name, ""))
    body = response.content.decode(errors="replace")
    shown = [secret for secret in SECRETS if secret in body]
    if response.status_code != 200 or shown:
        return [f"{route.name}: {response.status_code}, shows guild B's {shown}"]
    return []


async def socket_leaks(tenancy: Tenancy, session: str) -> list[str]:
    """The same walk over every websocket route: a channel of guild B is not found (the socket
    closes at once with 4404, nothing sent); a socket of no object shows nothing of B."""
    from botproject.asgi import application
    from dashboard.routing import websocket_urlpatterns

    problems = []
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode()),
    ]
    for pattern in websocket_urlpatterns:
        route = Route(str(pattern.pattern), str(pattern.pattern))
        missing = [p for p in route.parameters if p not in tenancy.b]
        if missing:
            problems.append(f"/{route.route}: no guild-B value for {missing} (add one)")
            continue
        socket = WebsocketCommunicator(application, route.path(tenancy.b), headers=headers)
        connected, code = await socket.connect()
        if "playground" in route.route:
            if connected or code != 4403:
                problems.append(f"/{route.route}: {connected, code} (operators only: 4403)")
            continue
        if not connected:
            problems.append(f"/{route.route}: refused with {code}")
            continue
        first = await socket.receive_output(timeout=5)
        if route.parameters:
            if first != {"type": "websocket.close", "code": 4404}:
                problems.append(f"/{route.route}: {str(first)[:200]} for guild B (4404)")
        else:
            text = first.get("text", "")
            shown = [secret for secret in SECRETS if secret in text]
            if first["type"] != "websocket.send" or shown:
                problems.append(f"/{route.route}: shows guild B's {shown}")
            await socket.disconnect()
    return problems


def configured_guilds() -> list[str]:
    return list(GuildConfig.objects.order_by("name").values_list("name", flat=True))
