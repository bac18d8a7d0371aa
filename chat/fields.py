"""Model fields of the bot's records."""

from __future__ import annotations

import json
import zlib
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class CompressedJSONField(models.BinaryField):
    """JSON stored zlib-compressed: a turn's prompt items and exact request repeat the same
    text, and prompts are most of what the database holds. Reads and writes look like a
    ``JSONField`` to Python (the value is any JSON-compatible object); the database sees bytes,
    so it cannot be filtered on."""

    description = "JSON, compressed"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        return json.loads(zlib.decompress(bytes(value)))

    def to_python(self, value: Any) -> Any:
        if isinstance(value, bytes | memoryview):
            return json.loads(zlib.decompress(bytes(value)))
        return value

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        encoded = json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"))
        return zlib.compress(encoded.encode(), level=6)

    def value_to_string(self, obj: models.Model) -> str:
        return json.dumps(self.value_from_object(obj), cls=DjangoJSONEncoder)
