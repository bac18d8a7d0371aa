from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from personas.audit import ChangeAuthor
from personas.config_schema import CONFIG_FILE_MAX_BYTES, ConfigError, parse_config_bytes
from personas.models import ChangeKind
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
        from_stdin = str(file) == "-"
        source = "standard input" if from_stdin else str(file)
        try:
            raw = _read_stdin() if from_stdin else _read_file(file)
        except OSError as error:
            raise CommandError(f"cannot read {source}: {error.strerror or error}") from None
        try:
            document = parse_config_bytes(raw, source=source)
            report = config_import(data=document, prune=prune, actor=_shell_author(source))
        except ConfigError as error:
            error.source = error.source or source
            raise CommandError(error.report()) from None
        self.stdout.write(report.summary())


def _shell_author(source: str) -> ChangeAuthor:
    """Who the audit trail names for this import: the shell's user, and the file."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = "unknown"
    return ChangeAuthor(kind=ChangeKind.IMPORTCONFIG, name=f"{who} (shell)", via=source)


def _read_file(path: Path) -> bytes:
    with path.open("rb") as stream:
        return _read_bounded(stream)


def _read_stdin() -> bytes:
    """Standard input as bytes (a replaced ``sys.stdin`` without ``buffer`` is text)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return _read_bounded(buffer)
    return sys.stdin.read(CONFIG_FILE_MAX_BYTES + 1).encode("utf-8")


def _read_bounded(stream: BinaryIO) -> bytes:
    """At most one byte more than the size limit: enough to tell that a file is too large
    without reading all of it."""
    return stream.read(CONFIG_FILE_MAX_BYTES + 1)
