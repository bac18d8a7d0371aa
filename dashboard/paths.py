"""Paths of the dashboard's pages by URL name and ids, for pages that link to hundreds of rows
(the overview: every guild's channels and latest turns).

Django's ``reverse`` matches the URL patterns again for each link; a page of 100 guilds spent a
third of its rendering there. `path_to` reverses each name once per process (with marker ids)
and fills the ids in after: the same path ``reverse`` gives, for URL patterns whose parameters
are integers.
"""

from __future__ import annotations

import functools

from django.urls import get_script_prefix, reverse

_MARK = 987_654_321_000
"""Marker ids: no URL of this project has them as literal text."""


@functools.cache
def _pieces(name: str, arity: int, prefix: str) -> tuple[str, ...]:
    path = reverse(name, args=[_MARK + i for i in range(arity)])
    pieces = []
    for i in range(arity):
        head, path = path.split(str(_MARK + i), 1)
        pieces.append(head)
    return (*pieces, path)


def path_to(name: str, *ids: int) -> str:
    """``reverse(name, args=ids)`` for integer ids, without matching the patterns again."""
    pieces = _pieces(name, len(ids), get_script_prefix())
    return "".join(piece + str(int(i)) for piece, i in zip(pieces, ids, strict=False)) + pieces[-1]
