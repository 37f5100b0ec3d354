# Fetch the test suite of the installed prometheus_client (its sdist ships tests/) into
# .peer-suites/<dist>-<version>/, once: tests/integration/metrics/test_prometheus_client_suite.py
# runs its TestMultiProcess against shmwin's multiprocess mode.
# Sourced by scripts/test (from the repository root, .venv ready); also runs on its own:
#   bash scripts/test.d/22-metrics-suite.sh
# A failed download stops scripts/test with pip's error: the peer suite is never skipped.
source "$(dirname "${BASH_SOURCE[0]}")/../_sdist_tests.sh"
shmwin_fetch_sdist_tests "metrics suite" prometheus_client:tests/test_multiprocess.py
