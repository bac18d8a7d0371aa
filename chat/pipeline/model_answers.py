"""What a model wrote, checked against a schema (a planner action, extracted facts, a tool's
arguments): the problems pydantic found, in one line the model or a moderator can read."""

from __future__ import annotations

from pydantic import ValidationError


def problems_line(error: ValidationError, *, whole: str) -> str:
    """Each problem as ``path: message``, joined by ``; ``; a problem with the whole value
    (an empty path) is named ``whole`` (``"answer"``, ``"arguments"``)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or whole}: {problem['msg']}"
        for problem in error.errors(include_url=False)
    )
