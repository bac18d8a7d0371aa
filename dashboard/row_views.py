"""A guild's channels, blocks and user privacy rows.

One shape for the three: a list page with an add form (`rows_page`), an edit page
(`row_page`) and a delete (`row_delete`), each told which kind of row it serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from dashboard import selectors
from dashboard.access import change_author, guild_access, require_change, viewer_required
from dashboard.form_posts import form_saved, form_status, posted_with
from dashboard.forms import BlockForm, ChannelForm, SpecForm, UserPrivacyForm
from dashboard.names import guild_members
from personas.models import Block, ChannelConfig, GuildConfig, UserPrivacy
from personas.selectors import persona_names
from personas.services import block_save, channel_save, config_row_delete, user_privacy_save


@dataclass(frozen=True)
class RowKind:
    """One kind of a guild's configured rows, as its three views need it.

    ``name`` prefixes the URL names (``<name>_list``, ``<name>``, ``<name>_delete``) and names
    the partials (``_<name>_table.html``, ``_<name>_fields.html``); ``lookup`` is the model
    field the URL's id matches; ``fixed`` the form field an edit takes from the URL (None: the
    form may change every field); ``save`` stores a valid form's spec
    (``guild, spec, instance, actor``).
    """

    name: str
    section: str
    title: str
    intro: str
    add_title: str
    add_button: str
    model: type[models.Model]
    form: type[SpecForm]
    lookup: str
    fixed: str | None
    save: Callable[..., models.Model]
    ordering: tuple[str, ...]
    saved: str

    @property
    def table_template(self) -> str:
        return f"dashboard/_{self.name}_table.html"

    @property
    def fields_template(self) -> str:
        return f"dashboard/_{self.name}_fields.html"


CHANNELS = RowKind(
    name="channel",
    section="channels",
    title="Channels",
    intro="The bot answers only in configured, enabled channels.",
    add_title="Add or update a channel",
    add_button="Save the channel",
    model=ChannelConfig,
    form=ChannelForm,
    lookup="channel_id",
    fixed="channel_id",
    save=lambda guild, spec, instance, actor: channel_save(guild=guild, spec=spec, actor=actor),
    ordering=("channel_id",),
    saved="Saved the channel.",
)
BLOCKS = RowKind(
    name="block",
    section="blocks",
    title="Blocks and mutes",
    intro=(
        "A <em>block</em> hides a user's messages from the persona; a <em>mute</em> only stops "
        "them from triggering it."
    ),
    add_title="Add a block",
    add_button="Add the block",
    model=Block,
    form=BlockForm,
    lookup="pk",
    fixed=None,
    save=lambda guild, spec, instance, actor: block_save(
        guild=guild, spec=spec, block=instance, actor=actor
    ),
    ordering=("user_id", "type"),
    saved="Saved the block.",
)
USERS = RowKind(
    name="user",
    section="users",
    title="User privacy",
    intro=(
        "A user's level applies in this guild (in direct messages, the strictest level they "
        "hold in any guild). <em>Full</em>: never shown to the model, in previews or in records."
    ),
    add_title="Set a user's privacy",
    add_button="Save",
    model=UserPrivacy,
    form=UserPrivacyForm,
    lookup="user_id",
    fixed="user_id",
    save=lambda guild, spec, instance, actor: user_privacy_save(
        guild=guild, spec=spec, actor=actor
    ),
    ordering=("user_id",),
    saved="Saved the user's privacy.",
)


def guild_rows(kind: RowKind, guild: GuildConfig) -> models.QuerySet:
    """The guild's rows of ``kind`` (every lookup of a row starts here)."""
    return selectors.guild_rows(guild=guild, model=kind.model)


def _row_form(kind: RowKind, guild: GuildConfig, data: Any = None, **kwargs: Any) -> SpecForm:
    if kind is BLOCKS:
        kwargs["persona_names"] = persona_names(guild=guild)
        kwargs["members"] = guild_members(guild_id=guild.guild_id)
    return kind.form(data, **kwargs)


@require_http_methods(["GET", "POST"])
@viewer_required
def rows_page(request: HttpRequest, guild_id: int, kind: RowKind) -> HttpResponse:
    """The guild's rows of one kind; admins add one (or update it, by its id) below."""
    guild = guild_access(request, guild_id)
    form = _row_form(kind, guild)
    if request.method == "POST":
        require_change(request, guild.guild_id)
        form = _row_form(kind, guild, request.POST)
        if form.is_valid() and form_saved(
            form, lambda: kind.save(guild, form.spec, None, change_author(request))
        ):
            messages.success(request, kind.saved)
            return redirect(f"dashboard:{kind.name}_list", guild_id=guild_id)
    rows = guild_rows(kind, guild).order_by(*kind.ordering)
    return render(
        request,
        "dashboard/guild_rows.html",
        {
            "guild": guild,
            "kind": kind,
            "rows": rows,
            "form": form,
            "now": timezone.now(),
            "section": kind.section,
        },
        status=form_status(form),
    )


@require_http_methods(["GET", "POST"])
@viewer_required
def row_page(request: HttpRequest, guild_id: int, kind: RowKind, **url_id: int) -> HttpResponse:
    """One row: its settings (read-only for moderators), saved by admins."""
    ((_, row_id),) = url_id.items()
    guild = guild_access(request, guild_id)
    row = get_object_or_404(guild_rows(kind, guild), **{kind.lookup: row_id})
    form = _row_form(kind, guild, instance=row)
    if request.method == "POST":
        require_change(request, guild.guild_id)
        data = posted_with(request, **{kind.fixed: str(row_id)}) if kind.fixed else request.POST
        form = _row_form(kind, guild, data, instance=row)
        if form.is_valid() and form_saved(
            form, lambda: kind.save(guild, form.spec, row, change_author(request))
        ):
            messages.success(request, kind.saved)
            return redirect(f"dashboard:{kind.name}_list", guild_id=guild_id)
    return render(
        request,
        "dashboard/guild_row.html",
        {
            "guild": guild,
            "kind": kind,
            "row": row,
            "form": form,
            "delete_url": reverse(f"dashboard:{kind.name}_delete", args=[guild_id, row_id]),
            "section": kind.section,
        },
        status=form_status(form),
    )


@require_POST
@viewer_required
def row_delete(request: HttpRequest, guild_id: int, kind: RowKind, **url_id: int) -> HttpResponse:
    ((_, row_id),) = url_id.items()
    guild = guild_access(request, guild_id, change=True)
    row = get_object_or_404(guild_rows(kind, guild), **{kind.lookup: row_id})
    config_row_delete(instance=row, actor=change_author(request))
    messages.success(request, "Removed.")
    return redirect(f"dashboard:{kind.name}_list", guild_id=guild_id)
