from __future__ import annotations

from django.apps import AppConfig


class PersonasConfig(AppConfig):
    name = "personas"
    verbose_name = "Personas and server configuration"

    def ready(self) -> None:
        from personas.config_version import connect_signals

        connect_signals()
