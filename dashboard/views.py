"""Dashboard pages. Function views; each screen has one template, live pieces are partials.

Every page needs a login (``viewer_required``: people with a right in some guild) and shows
only what the person may see: a guild they have no right in answers 404 (`guild_access`), as
one that does not exist. Everything that changes configuration is a POST that needs the
guild's admin right (``guild_access(..., change=True)``), so a moderator's POST answers 403.
Saves go through ``personas.services``: one transaction each, recorded in the guild's audit
trail with the person who made them, and announced to running bot workers after the commit.
"""

from __future__ import annotations

import functools
import json

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
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
from dashboard.access import (
    change_author,
    editor_required,
    guild_access,
    operator_required,
    request_rights,
    require_change,
    viewer_required,
)
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
from dashboard.names import name_book
from dashboard.scaleout import scale_out
from dashboard.selectors import overview_shown
from personas import cards
from personas.audit import field_changes
from personas.config_schema import (
    CONFIG_FILE_MAX_BYTES,
    ConfigDocument,
    ConfigError,
    GuildSpec,
    LorebookSpec,
    PersonaSpec,
    decode_json_file,
    parse_config_bytes,
    parse_config_row,
)
from personas.models import ChangeKind, GuildConfig, Persona
from personas.selectors import config_changes, config_export, guild_audit, guild_audit_people
from personas.services import (
    audit_record,
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
    latest turns and errors; live over ``/ws/overview/``. A person sees their guilds only;
    workers and shards are for operators."""
    rights = request_rights(request)
    names = name_book(request)
    context = {
        "overview": overview_shown(overview=live_selectors.overview(rights=rights), book=names),
        "scale": scale_out() if rights.operator else None,
        "names": names,
    }
    return render(request, "dashboard/index.html", context)


@require_http_methods(["GET", "POST"])
@operator_required
def guild_new(request: HttpRequest) -> HttpResponse:
    """Add a guild by its Discord id (operators)."""
    form = GuildForm(initial={"timezone": "UTC", "message_fetch_limit": 80, "note_depth": 4})
    if request.method == "POST":
        form = GuildForm(request.POST)
        if form.is_valid():
            if live_selectors.guild_configured(guild_id=int(form.spec.id)):
                form.add_error("guild_id", "a guild with this id is already configured")
            else:
                guild = guild_save(spec=form.spec, actor=change_author(request))
                messages.success(request, f"Added {guild.name}.")
                return redirect("dashboard:guild", guild_id=guild.guild_id)
    return render(request, "dashboard/guild_new.html", {"form": form}, status=form_status(form))


@require_http_methods(["GET", "POST"])
@viewer_required
def guild_detail(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's own settings: name, timezone, fetch limit, guild note."""
    guild = guild_access(request, guild_id)
    form = GuildForm(instance=guild)
    if request.method == "POST":
        require_change(request, guild.guild_id)
        form = GuildForm(posted_with(request, guild_id=str(guild.guild_id)), instance=guild)
        if form.is_valid():
            guild_save(spec=form.spec, actor=change_author(request))
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
    guild = guild_access(request, guild_id)
    return render(
        request,
        "dashboard/persona_list.html",
        {
            "guild": guild,
            "personas": live_selectors.guild_personas_listed(guild=guild),
            "card_form": CardUploadForm(),
            "section": "personas",
        },
    )


@require_http_methods(["GET", "POST"])
@viewer_required
def persona_new(request: HttpRequest, guild_id: int) -> HttpResponse:
    guild = guild_access(request, guild_id)
    return _persona_edit(request, guild, None)


@require_http_methods(["GET", "POST"])
@viewer_required
def persona_detail(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    guild = guild_access(request, guild_id)
    return _persona_edit(request, guild, _persona_of(guild, persona_id))


def _persona_of(guild: GuildConfig, persona_id: int) -> Persona:
    """The guild's persona ``persona_id``; Http404 for any other id."""
    return get_object_or_404(live_selectors.guild_personas_listed(guild=guild), pk=persona_id)


def _persona_edit(
    request: HttpRequest, guild: GuildConfig, persona: Persona | None
) -> HttpResponse:
    """The persona's page (a new one's when ``persona`` is None); an admin's POST saves it
    and goes to its page, or shows the form with the problems."""
    form = PersonaForm(instance=persona)
    if request.method == "POST":
        require_change(request, guild.guild_id)
        form = PersonaForm(request.POST, instance=persona)
        if form.is_valid():
            try:
                _dm_handover_allowed(request, guild, wanted=form.spec.answers_dms)
                saved = persona_save(
                    guild=guild, spec=form.spec, persona=persona, actor=change_author(request)
                )
            except ConfigError as error:
                form.add_problems(error.problems)
            else:
                messages.success(request, f"{'Saved' if persona else 'Created'} {saved.name}.")
                return redirect("dashboard:persona", guild_id=guild.guild_id, persona_id=saved.pk)
    return persona_page(request, guild, persona, form)


def persona_page(
    request: HttpRequest, guild: GuildConfig, persona: Persona | None, form: PersonaForm
) -> HttpResponse:
    """The persona's page with ``form`` (its problems shown when refused: a save's, or a
    test run's against the form's unsaved values)."""
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
        "greet_channels": live_selectors.guild_channels(guild=guild) if persona else [],
        "greeting": persona.first_mes if persona else "",
        "section": "personas",
    }
    return render(request, "dashboard/persona.html", context, status=form_status(form))


@require_POST
@viewer_required
def persona_delete(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    persona = _persona_of(guild_access(request, guild_id, change=True), persona_id)
    config_row_delete(instance=persona, actor=change_author(request))
    messages.success(request, f"Deleted {persona.name}.")
    return redirect("dashboard:persona_list", guild_id=guild_id)


@require_POST
@editor_required
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
@viewer_required
def persona_greet_view(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Have the persona post a greeting (its first message) in one of the guild's channels,
    recorded as a turn; then show that turn."""
    guild = guild_access(request, guild_id, change=True)
    persona = _persona_of(guild, persona_id)
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
    channel_id = int(channel_raw)
    rights = request_rights(request)
    if not rights.unrestricted and live_selectors.channel_guild(channel_id=channel_id) != guild_id:
        messages.error(request, "Greeting: that channel is not one of this guild's.")
        return back
    author = change_author(request, kind=ChangeKind.GREETING)

    async def greet():
        async with discord_rest_port() as port:
            return await persona_greet(
                port=port, persona=persona, channel_id=channel_id, text=text, by=author.name
            )

    try:
        turn = async_to_sync(greet)()
    except DiscordUnavailable as error:
        messages.error(request, f"Greeting: Discord cannot be reached ({error}).")
        return back
    audit_record(
        author=author,
        guild_id=guild.guild_id,
        action="posted",
        object_type="persona",
        object_pk=str(persona.pk),
        object_label=persona.name,
        changes=field_changes(
            ["channel", "greeting", "turn"],
            {},
            {
                "channel": str(channel_id),
                "greeting": text.strip(),
                "turn": f"{turn.pk} ({turn.status})",
            },
        ),
    )
    if turn.status == turn.Status.REPLIED:
        messages.success(request, f"{persona.name} greeted the channel.")
    else:
        messages.error(request, f"The greeting was not delivered: {turn.error}")
    return redirect("dashboard:turn", turn_id=turn.pk)


@require_POST
@viewer_required
def chat_preset_upload(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Assign an uploaded SillyTavern Chat Completion preset (its exported JSON file) to the
    persona: the persona's row with the preset, checked by the import's rules and saved as
    one (a problem names its path in the preset; nothing is saved then)."""
    persona = _persona_of(guild_access(request, guild_id, change=True), persona_id)
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
        author = change_author(request, kind=ChangeKind.UPLOAD, via=upload.name or "preset")
        persona_save(guild=persona.guild, spec=spec, persona=persona, actor=author)
    except ConfigError as error:
        for path, message in error.problems[:10]:
            messages.error(request, f"Preset: {path}: {message}")
        return back
    messages.success(request, f"{persona.name} now uses the preset {upload.name}.")
    return back


@require_http_methods(["GET", "POST"])
@viewer_required
def lorebook_editor(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """A persona's lorebook, one row per entry (`dashboard.lorebook_editor`), with the test
    box; saving checks the book with the persona's row by the import's rules. For the guild's
    admins."""
    guild = guild_access(request, guild_id, change=True)
    return _lorebook_editor(request, guild, _persona_of(guild, persona_id))


@require_http_methods(["GET", "POST"])
@viewer_required
def guild_lorebook_editor(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's lorebook (shared by its personas), as `lorebook_editor` edits a persona's."""
    return _lorebook_editor(request, guild_access(request, guild_id, change=True), None)


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
        guild_save(spec=guild_spec, actor=change_author(request, via="lorebook editor"))
        return
    [row] = [row for row in exported["personas"] if row["name"] == persona.name]
    spec = parse_config_row("personas", {**row, "lorebook": book})
    assert isinstance(spec, PersonaSpec)
    persona_save(
        guild=guild, spec=spec, persona=persona, actor=change_author(request, via="lorebook editor")
    )


@require_POST
@editor_required
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
        book = compile_lorebook(
            lorebook_from_stored(stored=spec.model_dump(mode="json"), fallback_name="lorebook")
        )
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
@editor_required
def sample_row(request: HtmxHttpRequest) -> HttpResponse:
    """htmx: one empty sample dialogue row, appended by the "Add a row" button."""
    return render(request, "dashboard/_sample_row.html", {"row": {"role": "user", "content": ""}})


@require_GET
@editor_required
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


# --- The audit trail -----------------------------------------------------------------------------

AUDIT_PAGE_SIZE = 50


@require_GET
@viewer_required
def guild_audit_view(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's audit trail, newest first: every configuration change with its author,
    how it was made and each field's before and after; ``?person=`` (a key the filter
    offers) and ``?kind=`` (dashboard, upload, importconfig, command, greeting) narrow it."""
    guild = guild_access(request, guild_id)
    person = request.GET.get("person", "").strip()
    kind = request.GET.get("kind", "").strip()
    kind = kind if kind in ChangeKind.values else ""
    changes = guild_audit(guild_id=guild.guild_id, person=person, kind=kind)
    page = Paginator(changes, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "dashboard/audit.html",
        {
            "guild": guild,
            "section": "audit",
            "page": page,
            "person": person,
            "kind": kind,
            "kinds": ChangeKind.choices,
            "people": guild_audit_people(guild_id=guild.guild_id),
            "query": query.urlencode(),
        },
    )


# --- Character cards ----------------------------------------------------------------------------


@require_POST
@viewer_required
def card_import(request: HttpRequest, guild_id: int) -> HttpResponse:
    """Create a persona from a SillyTavern character card (V2/V3 JSON, or PNG)."""
    guild = guild_access(request, guild_id, change=True)
    form = CardUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            persona = cards.card_import(
                guild=guild,
                data=form.cleaned_data["file"].read(),
                media_base_url=request.build_absolute_uri(settings.MEDIA_URL),
                actor=change_author(
                    request, kind=ChangeKind.UPLOAD, via=form.cleaned_data["file"].name or "card"
                ),
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
            "personas": live_selectors.guild_personas_listed(guild=guild),
            "card_form": form,
            "section": "personas",
        },
        status=400,
    )


@require_GET
@viewer_required
def card_export(request: HttpRequest, guild_id: int, persona_id: int, fmt: str) -> HttpResponse:
    """The persona as a SillyTavern V2 card: ``json``, or ``png`` (the card in a tEXt chunk)."""
    persona = _persona_of(guild_access(request, guild_id), persona_id)
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


def _upload_allowed(request: HttpRequest, document: ConfigDocument) -> None:
    """Raise ConfigError naming every guild of the file the person may not change (the file is
    then refused whole, nothing written), a price table from anyone but an operator (the
    prices are the operator's: they pay the provider), and a DM role it would take from
    another guild's persona they may not change."""
    rights = request_rights(request)
    problems = [
        (f"guilds[{g}].id", f"{spec.id} is not a guild you may change; nothing was imported")
        for g, spec in enumerate(document.guilds)
        if not rights.may_change(int(spec.id))
    ]
    if document.prices is not None and not rights.operator:
        problems.append(("prices", "only operators set prices; nothing was imported"))
    if not problems:
        listed = {int(spec.id) for spec in document.guilds}
        for g, spec in enumerate(document.guilds):
            for p, persona in enumerate(spec.personas):
                if persona.answers_dms and _dm_holder_elsewhere(request, listed):
                    problems.append((f"guilds[{g}].personas[{p}].answers_dms", DM_ELSEWHERE))
    if problems:
        raise ConfigError(problems)


DM_ELSEWHERE = (
    "a persona of another guild answers direct messages; only someone who may change that "
    "guild can hand the role over"
)


def _dm_holder_elsewhere(request: HttpRequest, guild_ids: set[int]) -> bool:
    """The persona answering DMs now is of a guild outside ``guild_ids`` that the person may
    not change."""
    holder = live_selectors.dm_guild_id()
    return (
        holder is not None
        and holder not in guild_ids
        and not request_rights(request).may_change(holder)
    )


def _dm_handover_allowed(request: HttpRequest, guild: GuildConfig, *, wanted: bool) -> None:
    """ConfigError when making a persona of ``guild`` answer DMs would take the role from
    another guild's persona the person may not change."""
    if wanted and _dm_holder_elsewhere(request, {guild.guild_id}):
        raise ConfigError([("answers_dms", DM_ELSEWHERE)])


@require_GET
@viewer_required
def config_export_view(request: HttpRequest) -> HttpResponse:
    """Download what ``exportconfig`` prints, of the guilds the person may see (an operator:
    every guild, and the price table)."""
    rights = request_rights(request)
    guild_ids = None if rights.unrestricted else sorted(rights.roles)
    body = json.dumps(
        config_export(guild_ids=guild_ids, prices=rights.operator), indent=2, ensure_ascii=False
    )
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = 'attachment; filename="guilds.json"'
    return response


@require_http_methods(["GET", "POST"])
@viewer_required
def config_import_view(request: HttpRequest) -> HttpResponse:
    """Upload a configuration file; shows ``importconfig``'s report, or its problems (with
    JSON paths) and changes nothing. A file that touches a guild the person may not change is
    refused whole, naming it."""
    form = ConfigUploadForm()
    problems: list[tuple[str, str]] = []
    summary = ""
    status = 200
    if request.method == "POST":
        if not request_rights(request).changes_any:
            require_change(request, None)
        form = ConfigUploadForm(request.POST, request.FILES)
        status = 400
        if form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                document = parse_config_bytes(
                    upload.read(CONFIG_FILE_MAX_BYTES + 1), source=upload.name
                )
                _upload_allowed(request, document)
                author = change_author(request, kind=ChangeKind.UPLOAD, via=upload.name or "")
                report = config_import(
                    data=document, prune=form.cleaned_data["prune"], actor=author
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
