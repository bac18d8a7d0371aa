"""HTTP responses as Discord sends them.

discord.py decodes a body as JSON only when `Content-Type` is exactly `application/json`
(aiohttp's `json_response` appends `; charset=utf-8`, which discord.py would read as text).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def json_response(data: Any, status: int = 200) -> web.Response:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(body=body, status=status, headers={"Content-Type": "application/json"})


def no_content() -> web.Response:
    return web.Response(status=204)
