"""`path_to` gives what ``reverse`` gives, for every dashboard URL of integer parameters."""

from __future__ import annotations

from django.urls import reverse

from dashboard import urls
from dashboard.paths import path_to


def test_every_url_of_integer_ids_has_the_path_reverse_gives():
    checked = 0
    for pattern in urls.urlpatterns:
        converters = pattern.pattern.converters
        if not converters or any(type(c).__name__ != "IntConverter" for c in converters.values()):
            continue
        ids = [1100000000000000001 + n for n in range(len(converters))]
        name = f"dashboard:{pattern.name}"
        assert path_to(name, *ids) == reverse(name, args=ids), name
        checked += 1
    assert checked > 20
    assert path_to("dashboard:turn", 7) == "/turns/7/"
