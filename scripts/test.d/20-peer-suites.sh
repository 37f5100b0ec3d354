# Fetch the test suites of the installed limits and Flask-Limiter (their sdists ship them) into
# .peer-suites/<dist>-<version>/, once: tests/integration/limits/test_peer_suites.py runs them against shm://.
# Sourced by scripts/test (from the repository root, .venv ready); also runs on its own:
#   bash scripts/test.d/20-peer-suites.sh
# A failed download stops scripts/test with pip's error: the peer suites are never skipped.
source "$(dirname "${BASH_SOURCE[0]}")/../_sdist_tests.sh"
shmwin_fetch_sdist_tests "peer suites" limits:tests flask-limiter:tests
