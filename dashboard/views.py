"""Dashboard pages. Function views; each screen has one template, live pieces are partials.

Every page needs a login (``viewer_required``: admins and moderators); everything that changes
configuration is a POST behind ``admin_required``, so a moderator's POST answers 403. Saves go
through ``personas.services``: one transaction each, logged, and announced to running bot
workers after the commit.
"""

from __future__ import annotations

import functools
import json

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import messages
from django.db import connection
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails
from pydantic import ValidationError

from chat.pipeline.lorebook import activate_lorebooks, compile_lorebook, lore_budget
from chat.pipeline.tokens import TokenCounter, default_token_counter
from chat.ports import DiscordUnavailable
from chat.runtime import discord_rest_port
from chat.selectors.lore import lorebook_from_stored
from chat.services.greeting import GREETING_MAX, persona_greet
from dashboard import selectors as live_selectors
from dashboard.access import admin_required, is_admin, require_admin, viewer_required
from dashboard.form_posts import form_status, posted_with
from dashboard.forms import (
    CardUploadForm,
    ConfigUploadForm,
    GuildForm,
    PersonaForm,
)
from dashboard.lorebook_editor import (
    BLANK_ENTRY,
    LOGIC_CHOICES,
    POSITION_CHOICES,
    ROLE_CHOICES,
    book_from_rows,
)
from dashboard.lorebook_editor import rows_for as lorebook_rows_for
from dashboard.scaleout import scale_out
from personas import cards
from personas.config_schema import (
    CONFIG_FILE_MAX_BYTES,
    ConfigError,
    GuildSpec,
    LorebookSpec,
    PersonaSpec,
    decode_json_file,
    parse_config_bytes,
    parse_config_row,
)
from personas.models import ChannelConfig, GuildConfig, Persona
from personas.selectors import config_changes, config_export
from personas.services import (
    config_import,
    config_row_delete,
    guild_save,
    persona_save,
)


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware."""

    htmx: HtmxDetails


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for operators and process supervisors: the database answers a query."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


# --- Guilds -------------------------------------------------------------------------------------


@require_GET
@viewer_required
def index(request: HttpRequest) -> HttpResponse:
    """The overview: every worker with its shard leases and a reshard in progress; per guild,
    the worker's shards and latency, each channel's queue, unread pool and loop state, the
    latest turns and errors; live over ``/ws/overview/``."""
    context = {"overview": live_selectors.overview(), "scale": scale_out()}
    return render(request, "dashboard/index.html", context)


@require_http_methods(["GET", "POST"])
@viewer_required
def guild_new(request: HttpRequest) -> HttpResponse:
    """Add a guild by its Discord id (admins)."""
    form = GuildForm(initial={"timezone": "UTC", "message_fetch_limit": 80, "note_depth": 4})
    if request.method == "POST":
        require_admin(request)
        form = GuildForm(request.POST)
        if form.is_valid():
            if GuildConfig.objects.filter(guild_id=int(form.spec.id)).exists():
                form.add_error("guild_id", "a guild with this id is already configured")
            else:
                guild = guild_save(spec=form.spec, actor=request.user)
                messages.success(request, f"Added {guild.name}.")
                return redirect("dashboard:guild", guild_id=guild.guild_id)
    return render(request, "dashboard/guild_new.html", {"form": form}, status=form_status(form))


@require_http_methods(["GET", "POST"])
@viewer_required
def guild_detail(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's own settings: name, timezone, fetch limit, guild note."""
    guild = get_object_or_404(GuildConfig, guild_id=guild_id)
    form = GuildForm(instance=guild)
    if request.method == "POST":
        require_admin(request)
        form = GuildForm(posted_with(request, guild_id=str(guild.guild_id)), instance=guild)
        if form.is_valid():
            guild_save(spec=form.spec, actor=request.user)
            messages.success(request, "Saved the guild settings.")
            return redirect("dashboard:guild", guild_id=guild.guild_id)
    return render(
        request,
        "dashboard/guild.html",
        {"guild": guild, "form": form, "section": "guild"},
        status=form_status(form),
    )


# --- Personas -----------------------------------------------------------------------------------


@require_GET
@viewer_required
def persona_list(request: HttpRequest, guild_id: int) -> HttpResponse:
    guild = get_object_or_404(GuildConfig, guild_id=guild_id)
    return render(
        request,
        "dashboard/persona_list.html",
        {
            "guild": guild,
            "personas": guild.personas.order_by("-is_main", "name"),
            "card_form": CardUploadForm(),
            "section": "personas",
        },
    )


@require_http_methods(["GET", "POST"])
@viewer_required
def persona_new(request: HttpRequest, guild_id: int) -> HttpResponse:
    guild = get_object_or_404(GuildConfig, guild_id=guild_id)
    return _persona_edit(request, guild, None)


@require_http_methods(["GET", "POST"])
@viewer_required
def persona_detail(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    guild = get_object_or_404(GuildConfig, guild_id=guild_id)
    persona = get_object_or_404(Persona, pk=persona_id, guild=guild)
    return _persona_edit(request, guild, persona)


def _persona_edit(
    request: HttpRequest, guild: GuildConfig, persona: Persona | None
) -> HttpResponse:
    """The persona's page (a new one's when ``persona`` is None); an admin's POST saves it
    and goes to its page, or shows the form with the problems."""
    form = PersonaForm(instance=persona)
    if request.method == "POST":
        require_admin(request)
        form = PersonaForm(request.POST, instance=persona)
        if form.is_valid():
            try:
                saved = persona_save(
                    guild=guild, spec=form.spec, persona=persona, actor=request.user
                )
            except ConfigError as error:
                form.add_problems(error.problems)
            else:
                messages.success(request, f"{'Saved' if persona else 'Created'} {saved.name}.")
                return redirect("dashboard:persona", guild_id=guild.guild_id, persona_id=saved.pk)
    return _persona_page(request, guild, persona, form)


def _persona_page(
    request: HttpRequest, guild: GuildConfig, persona: Persona | None, form: PersonaForm
) -> HttpResponse:
    system_prompt = form["system_prompt"].value() or ""
    context = {
        "guild": guild,
        "persona": persona,
        "form": form,
        "sample_rows": [
            {**row, "errors": form.sample_errors.get(i, [])}
            for i, row in enumerate(form.sample_rows)
        ],
        "blank_row": {"role": _next_role(form.sample_rows), "content": ""},
        "token_count": _token_counter().count(system_prompt),
        "tokenizer": _token_counter().name,
        "changes": config_changes(instance=persona) if persona else [],
        "greet_channels": ChannelConfig.objects.filter(guild=guild) if persona else [],
        "greeting": persona.first_mes if persona else "",
        "section": "personas",
    }
    return render(request, "dashboard/persona.html", context, status=form_status(form))


@require_POST
@admin_required
def persona_delete(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    persona = get_object_or_404(Persona, pk=persona_id, guild__guild_id=guild_id)
    config_row_delete(instance=persona, actor=request.user)
    messages.success(request, f"Deleted {persona.name}.")
    return redirect("dashboard:persona_list", guild_id=guild_id)


@require_POST
@admin_required
def token_count(request: HtmxHttpRequest) -> HttpResponse:
    """htmx: the token count of the posted ``system_prompt``, with the pipeline's tokenizer."""
    counter = _token_counter()
    return render(
        request,
        "dashboard/_token_count.html",
        {
            "token_count": counter.count(request.POST.get("system_prompt", "")),
            "tokenizer": counter.name,
        },
    )


@require_POST
@admin_required
def persona_greet_view(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Have the persona post a greeting (its first message) in one of the guild's channels,
    recorded as a turn; then show that turn."""
    persona = get_object_or_404(Persona, pk=persona_id, guild__guild_id=guild_id)
    channel_raw = request.POST.get("channel_id", "").strip()
    # An alternate greeting's button sends it as ``greeting``; else the (edited) text box.
    text = request.POST.get("greeting") or request.POST.get("text", "")
    back = redirect("dashboard:persona", guild_id=guild_id, persona_id=persona.pk)
    if not channel_raw.isdigit():
        messages.error(request, "Greeting: give the Discord id of the channel to greet.")
        return back
    if not text.strip() or len(text.strip()) > GREETING_MAX:
        messages.error(request, f"Greeting: write 1 to {GREETING_MAX:,} characters.")
        return back

    async def greet():
        async with discord_rest_port() as port:
            return await persona_greet(
                port=port,
                persona=persona,
                channel_id=int(channel_raw),
                text=text,
                by=request.user.get_username(),
            )

    try:
        turn = async_to_sync(greet)()
    except DiscordUnavailable as error:
        messages.error(request, f"Greeting: Discord cannot be reached ({error}).")
        return back
    if turn.status == turn.Status.REPLIED:
        messages.success(request, f"{persona.name} greeted the channel.")
    else:
        messages.error(request, f"The greeting was not delivered: {turn.error}")
    return redirect("dashboard:turn", turn_id=turn.pk)


@require_POST
@admin_required
def chat_preset_upload(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Assign an uploaded SillyTavern Chat Completion preset (its exported JSON file) to the
    persona: the persona's row with the preset, checked by the import's rules and saved as
    one (a problem names its path in the preset; nothing is saved then)."""
    persona = get_object_or_404(Persona, pk=persona_id, guild__guild_id=guild_id)
    back = redirect("dashboard:persona", guild_id=guild_id, persona_id=persona.pk)
    upload = request.FILES.get("preset")
    if upload is None:
        messages.error(request, "Preset: choose a SillyTavern preset file (JSON, at most 4 MB).")
        return back
    try:
        preset = decode_json_file(upload.read(CONFIG_FILE_MAX_BYTES + 1))
    except ConfigError as error:
        for _document, message in error.problems:
            messages.error(request, f"Preset: the file {message}.")
        return back
    [row] = [
        row
        for row in config_export(guild_ids=[persona.guild.guild_id])["guilds"][0]["personas"]
        if row["name"] == persona.name
    ]
    try:
        spec = parse_config_row("personas", {**row, "chat_preset": preset})
        assert isinstance(spec, PersonaSpec)
        persona_save(guild=persona.guild, spec=spec, persona=persona, actor=request.user)
    except ConfigError as error:
        for path, message in error.problems[:10]:
            messages.error(request, f"Preset: {path}: {message}")
        return back
    messages.success(request, f"{persona.name} now uses the preset {upload.name}.")
    return back


@require_http_methods(["GET", "POST"])
@admin_required
def lorebook_editor(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """A persona's lorebook, one row per entry (`dashboard.lorebook_editor`), with the test
    box; saving checks the book with the persona's row by the import's rules."""
    persona = get_object_or_404(Persona, pk=persona_id, guild__guild_id=guild_id)
    return _lorebook_editor(request, persona.guild, persona)


@require_http_methods(["GET", "POST"])
@admin_required
def guild_lorebook_editor(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's lorebook (shared by its personas), as `lorebook_editor` edits a persona's."""
    return _lorebook_editor(request, get_object_or_404(GuildConfig, guild_id=guild_id), None)


def _lorebook_editor(
    request: HttpRequest, guild: GuildConfig, persona: Persona | None
) -> HttpResponse:
    owner: GuildConfig | Persona = persona if persona is not None else guild
    problems: list[str] = []
    rows = lorebook_rows_for(owner.lorebook)
    if request.method == "POST":
        book = book_from_rows(request.POST, owner.lorebook)
        try:
            _lorebook_save(request, guild, persona, book)
        except ConfigError as error:
            problems = [f"{path}: {message}" for path, message in error.problems]
            rows = lorebook_rows_for(book)
        else:
            messages.success(request, "Saved the lorebook.")
            return redirect(request.path)
    context = {
        "guild": guild,
        "persona": persona,
        "owner_name": persona.name if persona is not None else guild.name,
        "rows": rows,
        "blank": {**BLANK_ENTRY, "keys_text": "", "secondary_text": ""},
        "problems": problems,
        "logic_choices": LOGIC_CHOICES,
        "position_choices": POSITION_CHOICES,
        "role_choices": ROLE_CHOICES,
        "lorebook_json": json.dumps(owner.lorebook or {"entries": []}),
        "context_window": persona.context_window if persona is not None else 16000,
        "section": "personas" if persona is not None else "guild",
    }
    return render(request, "dashboard/lorebook.html", context, status=400 if problems else 200)


def _lorebook_save(
    request: HttpRequest, guild: GuildConfig, persona: Persona | None, book: dict
) -> None:
    """Save ``book`` as the persona's (or the guild's) lorebook through its row, by the
    import's rules. Raises ConfigError."""
    [exported] = config_export(guild_ids=[guild.guild_id])["guilds"]
    if persona is None:
        collections = ("personas", "channels", "blocks", "users")
        row = {key: value for key, value in exported.items() if key not in collections}
        guild_spec = parse_config_row(None, {**row, "lorebook": book})
        assert isinstance(guild_spec, GuildSpec)
        guild_save(spec=guild_spec, actor=request.user)
        return
    [row] = [row for row in exported["personas"] if row["name"] == persona.name]
    spec = parse_config_row("personas", {**row, "lorebook": book})
    assert isinstance(spec, PersonaSpec)
    persona_save(guild=guild, spec=spec, persona=persona, actor=request.user)


@require_POST
@admin_required
def lorebook_test(request: HtmxHttpRequest) -> HttpResponse:
    """htmx: which entries of the posted ``lorebook`` (the editor's JSON, saved or not) the
    posted ``messages`` (one a line, newest last) would activate, on which key, and what the
    budget would leave out; the same activation a turn runs (`chat.pipeline.lorebook`), rolls
    seeded with ``seed`` (a message id, 0 by default)."""
    context: dict[str, object] = {}
    try:
        data = json.loads(request.POST.get("lorebook", "") or "null")
        spec = LorebookSpec.model_validate(data) if data is not None else None
    except (json.JSONDecodeError, ValidationError) as error:
        context["error"] = f"The lorebook is not valid yet: {str(error).splitlines()[0]}"
        spec = None
    messages_text = [line for line in request.POST.get("messages", "").splitlines() if line]
    if spec is not None and messages_text:
        book = compile_lorebook(lorebook_from_stored(spec.model_dump(mode="json"), "lorebook"))
        counter = _token_counter()
        context["activation"] = activate_lorebooks(
            [book],
            messages=messages_text,
            seed=request.POST.get("seed", "0").strip() or "0",
            budget=lore_budget(_int_or(request.POST.get("context_window"), 16000), [book]),
            token_counter=counter,
        )
    return render(request, "dashboard/_lorebook_test.html", context)


def _int_or(value: str | None, default: int) -> int:
    try:
        return int(value or "")
    except ValueError:
        return default


@require_GET
@admin_required
def sample_row(request: HtmxHttpRequest) -> HttpResponse:
    """htmx: one empty sample dialogue row, appended by the "Add a row" button."""
    return render(request, "dashboard/_sample_row.html", {"row": {"role": "user", "content": ""}})


@require_GET
@admin_required
def avatar_preview(request: HtmxHttpRequest) -> HttpResponse:
    """htmx: the avatar preview for the typed ``avatar_url`` (nothing when it is not a URL)."""
    url = request.GET.get("avatar_url", "").strip()
    try:
        PersonaSpec.model_validate({"name": "preview", "avatar_url": url})
    except ValidationError:
        url = ""
    return render(request, "dashboard/_avatar_preview.html", {"avatar_url": url})


def _next_role(rows: list[dict]) -> str:
    """The role of the row after ``rows``: dialogue alternates, starting with the user."""
    return "assistant" if rows and rows[-1].get("role") == "user" else "user"


@functools.cache
def _token_counter() -> TokenCounter:
    return default_token_counter()


# --- Character cards ----------------------------------------------------------------------------


@require_POST
@admin_required
def card_import(request: HttpRequest, guild_id: int) -> HttpResponse:
    """Create a persona from a SillyTavern character card (V2/V3 JSON, or PNG)."""
    guild = get_object_or_404(GuildConfig, guild_id=guild_id)
    form = CardUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            persona = cards.card_import(
                guild=guild,
                data=form.cleaned_data["file"].read(),
                media_base_url=request.build_absolute_uri(settings.MEDIA_URL),
                actor=request.user,
            )
        except cards.CardError as error:
            form.add_error("file", str(error))
        except ConfigError as error:
            for path, message in error.problems:
                form.add_error("file", f"{path}: {message}")
        else:
            messages.success(request, f"Imported {persona.name} from the character card.")
            return redirect("dashboard:persona", guild_id=guild_id, persona_id=persona.pk)
    return render(
        request,
        "dashboard/persona_list.html",
        {
            "guild": guild,
            "personas": guild.personas.order_by("-is_main", "name"),
            "card_form": form,
            "section": "personas",
        },
        status=400,
    )


@require_GET
@viewer_required
def card_export(request: HttpRequest, guild_id: int, persona_id: int, fmt: str) -> HttpResponse:
    """The persona as a SillyTavern V2 card: ``json``, or ``png`` (the card in a tEXt chunk)."""
    persona = get_object_or_404(Persona, pk=persona_id, guild__guild_id=guild_id)
    card = cards.card_from_persona(persona)
    filename = f"{persona.name}.{fmt}"
    if fmt == "json":
        response = HttpResponse(
            json.dumps(card, indent=2, ensure_ascii=False), content_type="application/json"
        )
    elif fmt == "png":
        response = HttpResponse(
            cards.card_png(card, avatar=cards.avatar_image(persona)), content_type="image/png"
        )
    else:
        raise Http404
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response


# --- The configuration file ---------------------------------------------------------------------


@require_GET
@viewer_required
def config_export_view(request: HttpRequest) -> HttpResponse:
    """Download what ``exportconfig`` prints; the price table only for operators."""
    body = json.dumps(config_export(prices=is_admin(request.user)), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = 'attachment; filename="guilds.json"'
    return response


@require_http_methods(["GET", "POST"])
@viewer_required
def config_import_view(request: HttpRequest) -> HttpResponse:
    """Upload a configuration file; shows ``importconfig``'s report, or its problems (with
    JSON paths) and changes nothing."""
    form = ConfigUploadForm()
    problems: list[tuple[str, str]] = []
    summary = ""
    status = 200
    if request.method == "POST":
        require_admin(request)
        form = ConfigUploadForm(request.POST, request.FILES)
        status = 400
        if form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                document = parse_config_bytes(
                    upload.read(CONFIG_FILE_MAX_BYTES + 1), source=upload.name
                )
                report = config_import(
                    data=document, prune=form.cleaned_data["prune"], actor=request.user
                )
            except ConfigError as error:
                problems = error.problems
            else:
                summary = report.summary()
                status = 200
    return render(
        request,
        "dashboard/config_import.html",
        {"form": form, "problems": problems, "summary": summary, "section": "config"},
        status=status,
    )
