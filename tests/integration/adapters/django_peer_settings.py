"""Django settings for django-ratelimit's own tests on ShmwinCounterCache: its repository's
test_settings.py (which the sdist lacks), with the default cache, the one its tests count in,
on shared memory (``SHMWIN_PEER_PREFIX``: the segment, unique to the run). The other caches
are its own fakes for failure paths (memcached and redis at unresolvable hosts, a dummy)."""

import os

SECRET_KEY = "ratelimit"
SILENCED_SYSTEM_CHECKS = ["django_ratelimit.E003", "django_ratelimit.W001"]
INSTALLED_APPS = ("django_ratelimit",)
RATELIMIT_USE_CACHE = "default"
CACHES = {
    "default": {
        "BACKEND": "shmwin.integrations.django.ShmwinCounterCache",
        "LOCATION": os.environ["SHMWIN_PEER_PREFIX"],
    },
    "connection-errors": {
        "BACKEND": "django.core.cache.backends.memcached.PyMemcacheCache",
        "LOCATION": "test-connection-errors",
    },
    "connection-errors-redis": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://test-connection-errors",
        "OPTIONS": {"IGNORE_EXCEPTIONS": True},
    },
    "instant-expiration": {
        "BACKEND": "django.core.cache.backends.dummy.DummyCache",
        "LOCATION": "test-instant-expiration",
    },
}
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
