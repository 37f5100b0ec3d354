"""Worker bodies for the Django counter cache's multiprocess tests (importable by spawned
children and by ``python -c``): each configures Django with one ShmwinCounterCache."""

from __future__ import annotations

from typing import Any


def configure(location: str) -> Any:
    """Django set up in this process with the default cache on ``location``; that cache."""
    import django
    from django.conf import settings

    if not settings.configured:
        backend = "shmwin.integrations.django.ShmwinCounterCache"
        settings.configure(
            CACHES={"default": {"BACKEND": backend, "LOCATION": location}},
            INSTALLED_APPS=["django_ratelimit"], SILENCED_SYSTEM_CHECKS=["django_ratelimit.W001"],
        )  # fmt: skip
        django.setup()
    from django.core.cache import cache

    return cache


def ratelimited_requests(location: str, limit: int, offered: int) -> int:
    """``offered`` requests of one client through django-ratelimit's own counting (cache.add, then
    cache.incr) at ``limit`` an hour: how many it let through."""
    configure(location)
    from django.test import RequestFactory
    from django_ratelimit.core import get_usage

    request, passed, rate = RequestFactory().get("/"), 0, f"{limit}/h"
    for _ in range(offered):
        usage = get_usage(request, group="api", key=lambda *_: "client", rate=rate, increment=True)
        passed += not usage["should_limit"]
    return passed


def add_once(location: str, key: str, value: int) -> bool:
    """One ``cache.add``: whether this process set the key."""
    return bool(configure(location).add(key, value, 60))


def count_both_orders(location: str, n: int, incr_first: bool) -> None:
    """Count ``n`` requests on one key, each as django-ratelimit does (``add``, then ``incr`` if
    the key was there) or the other way round (``incr``, then ``add`` if the key was missing,
    then ``incr`` again if another process added it meanwhile)."""
    cache = configure(location)
    for _ in range(n):
        if not incr_first:
            if not cache.add("hits", 1, 3600):
                cache.incr("hits")
            continue
        try:
            cache.incr("hits")
        except ValueError:
            if not cache.add("hits", 1, 3600):
                cache.incr("hits")
