from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from personas.config_schema import ConfigError
from personas.services import config_import


class Command(BaseCommand):
    help = (
        "Import guild configuration from a JSON file (format version 1). The whole file is "
        "validated before anything is written; importing the same file twice changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="the JSON file, or - for standard input")
        parser.add_argument(
            "--prune",
            action="store_true",
            help="delete personas, channels, blocks and user rows of the listed guilds that the "
            "file does not mention",
        )

    def handle(self, *args, file: Path, prune: bool, **options) -> None:
        source = "standard input" if str(file) == "-" else str(file)
        try:
            text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
        except OSError as error:
            raise CommandError(f"cannot read {source}: {error.strerror}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{source} is not UTF-8 text") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise CommandError(
                f"{source} is not valid JSON: {error.msg} at line {error.lineno}, "
                f"column {error.colno}"
            ) from None
        try:
            report = config_import(data=data, prune=prune)
        except ConfigError as error:
            lines = "\n".join(f"  {path}: {message}" for path, message in error.problems)
            raise CommandError(
                f"{source} was not imported (nothing was changed):\n{lines}"
            ) from None
        self.stdout.write(report.summary())
