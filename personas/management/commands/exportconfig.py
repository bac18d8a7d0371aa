from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from personas.selectors import config_export


class Command(BaseCommand):
    help = "Print guild configuration as JSON (format version 1), ready for importconfig."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--guild",
            action="append",
            default=None,
            metavar="ID",
            help="export only this guild id (repeatable); default: every guild",
        )

    def handle(self, *args, guild: list[str] | None, **options) -> None:
        if guild is not None and not all(g.isdigit() for g in guild):
            raise CommandError("--guild takes a Discord id: digits only")
        ids = [int(g) for g in guild] if guild is not None else None
        document = config_export(guild_ids=ids)
        self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
