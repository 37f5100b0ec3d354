# The native core under UndefinedBehaviorSanitizer, in scripts/test's full run: 50-sanitizers.sh's
# UBSan build and run (the tests marked `sanitize`, the fail-point tests among them), on one
# worker, beside the suite. The suite's two workers leave about a third of the 2 cores idle (they
# wait on processes and servers); run after it, this build and its 815 tests sat on the run's
# critical path, before the AddressSanitizer run, for about 100 s. On its own it is the same as
#   SHMWIN_SANITIZERS=undefined bash scripts/checks.d/50-sanitizers.sh
# stage: beside the suite (one worker: one core at most)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ "${SHMWIN_FULL_RUN:-0}" != 1 ]; then
  echo "undefined: part of scripts/test's full run; bash scripts/checks.d/50-sanitizers.sh runs both builds"
  exit 0
fi
SHMWIN_SANITIZERS=undefined SHMWIN_SANITIZER_WORKERS=1 exec bash scripts/checks.d/50-sanitizers.sh "$@"
