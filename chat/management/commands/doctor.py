"""`manage.py doctor`: check a deployment, one line per check, exit 0 only when all pass."""

from __future__ import annotations

import asyncio
import json
import sys

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from chat.models import DoctorReport
from chat.runtime import discord_deployment
from chat.services.doctor import Examination, doctor_run


class Command(BaseCommand):
    help = (
        "Check the deployment: the Discord token, the privileged intents, the guilds, the slash "
        "commands, each configured channel's permissions and webhooks, the model endpoints and "
        "models, the database and Redis, and the turns Discord refused. One line per check, "
        "`ok` or `FAIL` with the fix; exit status 0 only when every check passes, 1 otherwise."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            help='print {"ok", "checks": [{"name", "ok", "detail", "guild_id", "channel_id"}], '
            '"invite_url", "application_id"} instead of lines',
        )

    def handle(self, *args: object, **options: object) -> None:
        report, examination = asyncio.run(
            doctor_run(
                discord=discord_deployment,
                origin=DoctorReport.Origin.COMMAND,
                now=timezone.now,
            )
        )
        if options["json"]:
            self.stdout.write(_as_json(examination))
        else:
            for check in examination.checks:
                self.stdout.write(check.line)
            if examination.invite_url:
                self.stdout.write(
                    f"\nInvite link (the permissions this configuration needs):\n"
                    f"{examination.invite_url}"
                )
            failed = sum(not check.ok for check in examination.checks)
            self.stdout.write(
                f"\n{len(examination.checks) - failed} ok, {failed} failed"
                + ("" if report is not None else " (the report could not be saved)")
            )
        self.stdout.flush()
        if not examination.ok:
            sys.exit(1)


def _as_json(examination: Examination) -> str:
    return json.dumps(
        {
            "ok": examination.ok,
            "checks": [check.as_json() for check in examination.checks],
            "invite_url": examination.invite_url,
            "application_id": (
                str(examination.application_id) if examination.application_id else None
            ),
        },
        ensure_ascii=False,
        indent=2,
    )
