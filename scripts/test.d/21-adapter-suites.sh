# Fetch the test suites of the installed pyrate-limiter and django-ratelimit (their sdists ship
# them: pyrate-limiter's tests/, django-ratelimit's django_ratelimit/tests.py) into
# .peer-suites/<dist>-<version>/, once: tests/integration/adapters/ runs them against
# ShmwinBucket and ShmwinCounterCache.
# Sourced by scripts/test (from the repository root, .venv ready); also runs on its own:
#   bash scripts/test.d/21-adapter-suites.sh
# A failed download stops scripts/test with pip's error: the peer suites are never skipped.
source "$(dirname "${BASH_SOURCE[0]}")/../_sdist_tests.sh"
shmwin_fetch_sdist_tests "adapter suites" pyrate-limiter:tests django-ratelimit:django_ratelimit/tests.py
