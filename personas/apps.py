from __future__ import annotations

from django.apps import AppConfig


class PersonasConfig(AppConfig):
    name = "personas"
    verbose_name = "Personas and server configuration"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from personas.config_version import config_versions_bump_all, connect_signals

        connect_signals()
        post_migrate.connect(
            config_versions_bump_all, sender=self, dispatch_uid="config_versions_after_migrate"
        )
