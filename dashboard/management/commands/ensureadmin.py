from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Create an admin account when the database has no staff user yet, and print its "
        "password once. Does nothing when a staff user exists."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin", help="default: admin")

    def handle(self, *args, username: str, **options) -> None:
        User = get_user_model()
        if User.objects.filter(is_staff=True).exists():
            return
        if User.objects.filter(username=username).exists():
            raise CommandError(
                f"no staff user exists, and {username!r} is taken by a non-staff user; "
                "run `manage.py createsuperuser`"
            )
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(
            f"Created the dashboard admin account: username {username!r}, password "
            f"{password!r}\n(shown once; change it in the admin, or run "
            f"`manage.py changepassword {username}`)"
        )
