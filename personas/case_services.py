"""Use cases that change a persona's test set (DESIGN §3b, "Persona tests").

Every way in checks a case with the same schema (`personas.case_schema`) and writes in one
transaction, so a refused case leaves nothing behind:

- ``persona_case_save``: one case (the dashboard's form, "Save as test case" on a turn);
- ``persona_cases_import``: a test file (the dashboard's import), every case's guild and
  persona resolved first (`cases_resolve`), then all written or none;
- the configuration file carries a persona's cases as its ``tests`` list
  (`personas.services.config_import`);
- the lines of someone who chose full privacy leave every case saved from a turn
  (`personas.models_cases.persona_cases_forget_user`, on their privacy row's save).

Changes are logged as the configuration's are (Django's ``LogEntry``, with an ``actor``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from personas.case_schema import CaseFile, PersonaCaseSpec, case_json
from personas.config_schema import ConfigError
from personas.models import GuildConfig, Persona
from personas.models_cases import PersonaTestCase
from personas.services import Actor, ImportReport, _prune, _upsert, case_upsert, report_audit

if TYPE_CHECKING:
    pass


def persona_case_save(
    *,
    persona: Persona,
    spec: PersonaCaseSpec,
    case: PersonaTestCase | None = None,
    author_ids: Mapping[str, int] | None = None,
    source_turn_id: int | None = None,
    actor: Actor = None,
) -> PersonaTestCase:
    """Create a case of ``persona`` (``case`` None) or replace ``case`` with ``spec``.

    ``author_ids`` (a case saved from a turn): each history author's Discord id by the name
    the case shows, kept to forget a person later. Raises ConfigError (path ``name``) when
    another case of the persona has that name, ignoring case.
    """
    with transaction.atomic():
        others = PersonaTestCase.objects.select_for_update().filter(persona=persona)
        if case is not None:
            others = others.exclude(pk=case.pk)
        if any(other.name.casefold() == spec.name.casefold() for other in others):
            raise ConfigError([("name", f"another case of {persona.name} is named {spec.name!r}")])
        values: dict[str, object] = {"name": spec.name, "spec": case_json(spec)}
        if author_ids is not None:
            values["author_ids"] = {name: str(i) for name, i in author_ids.items()}
        if source_turn_id is not None:
            values["source_turn_id"] = source_turn_id
        report = ImportReport()
        saved = _upsert(
            PersonaTestCase, report, existing=case, lookup={"persona": persona}, values=values
        )
        _logged(report, actor=actor)
    return saved


def persona_case_delete(*, case: PersonaTestCase, actor: Actor = None) -> None:
    """Delete one case (its earlier runs keep what they ran)."""
    report = ImportReport()
    with transaction.atomic():
        _prune(PersonaTestCase.objects.filter(pk=case.pk), report)
        _logged(report, actor=actor)


def _logged(report: ImportReport, *, actor: Actor) -> None:
    """Inside the write's transaction: the changes in the guild's audit trail, as the
    configuration's are. No worker is told: a test set is nothing a turn reads."""
    report_audit(report=report, actor=actor)


def cases_resolve(*, document: CaseFile, guild_ids: Collection[int] | None = None) -> list[Persona]:
    """The persona each case of ``document`` names, in order.

    ``guild_ids``: the guilds the caller may touch (None: every guild); a case naming another
    guild is refused exactly as one naming a guild that is not configured, so the file learns
    nothing about guilds it may not see. Raises ConfigError naming every case's
    ``cases[i].guild`` or ``cases[i].persona`` that names nothing here.
    """
    wanted = {int(case.guild) for case in document.cases}
    if guild_ids is not None:
        wanted &= set(guild_ids)
    guilds = {g.guild_id: g for g in GuildConfig.objects.filter(guild_id__in=wanted)}
    personas: dict[tuple[int, str], Persona] = {
        (p.guild.guild_id, p.name.casefold()): p
        for p in Persona.objects.filter(guild__in=guilds.values()).select_related("guild")
    }
    problems: list[tuple[str, str]] = []
    found: list[Persona] = []
    for index, case in enumerate(document.cases):
        guild = guilds.get(int(case.guild))
        if guild is None:
            problems.append(
                (f"cases[{index}].guild", f"no configured guild has the id {case.guild}")
            )
            continue
        persona = personas.get((guild.guild_id, case.persona.casefold()))
        if persona is None:
            names = ", ".join(sorted(n for g, n in _names(personas) if g == guild.guild_id))
            problems.append(
                (
                    f"cases[{index}].persona",
                    f"names no persona of {guild.name}: {case.persona!r} "
                    f"(its personas: {names or 'none'})",
                )
            )
            continue
        found.append(persona)
    if problems:
        raise ConfigError(problems)
    return found


def _names(personas: Mapping[tuple[int, str], Persona]) -> list[tuple[int, str]]:
    return [(guild_id, persona.name) for (guild_id, _), persona in personas.items()]


@dataclass(frozen=True)
class CasesImport:
    """What an import of a test file did: cases created, updated, unchanged."""

    created: int
    updated: int
    unchanged: int

    def summary(self) -> str:
        return (
            f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged"
            if self.created or self.updated
            else f"No changes: the {self.unchanged} cases already match the file."
        )


def persona_cases_import(
    *,
    document: CaseFile,
    guild_ids: Collection[int] | None = None,
    actor: Actor = None,
) -> CasesImport:
    """Write every case of a parsed test file into its persona's set, in one transaction: a
    case is matched by its persona and name (ignoring case) and written only when it differs,
    so importing a file twice changes nothing. Cases the file does not name are kept.

    Raises ConfigError (`cases_resolve`) before anything is written.
    """
    personas = cases_resolve(document=document, guild_ids=guild_ids)
    report = ImportReport()
    with transaction.atomic():
        for persona, case in zip(personas, document.cases, strict=True):
            case_upsert(persona=persona, case=case, report=report)
        _logged(report, actor=actor)
    counts = report.counts.get(PersonaTestCase.__name__, {})
    return CasesImport(
        created=counts.get("created", 0),
        updated=counts.get("updated", 0),
        unchanged=counts.get("unchanged", 0),
    )
