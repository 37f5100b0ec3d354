"""Check that the core's test build compiles every line its production build compiles.

scripts/checks.d/40-c-warnings.sh runs gcc's static analyser (-fanalyzer, the costly part of that
job) on the test build (-DSHMWIN_TEST) alone. That is enough only if the test build is a superset:
each file, preprocessed both ways, must differ only by lines the test build adds, once the
fail-point macros' test expansions are read as the production's no-ops (core.h: SECTION,
END_SECTION, FAILPOINT, NOSPACE_FOR_TEST). Any other difference (a line the production build
compiles and the test build does not, an #else branch) fails the job, and the analyser must
then run on both builds again.

    python scripts/_test_build_superset.py PRODUCTION.i TEST.i [PRODUCTION.i TEST.i ...]
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

# each test-build expansion (core.h), and what the production build has in its place
AS_PRODUCTION = [
    (re.compile(r"do \{ if \(fp_left > 0 && --fp_left == 0\) fp_fire\(\); \} while \(0\)"), "((void)0)"),
    (re.compile(r"do \{ if \(fp_armed\) fp_enter\([^;]*\); \} while \(0\)"), "((void)0)"),
    (re.compile(r"\(fp_left = 0\)"), "((void)0)"),
    (re.compile(r"\bfp_nospace\b"), "0"),
]


def as_production(line: str) -> str:
    for pattern, replacement in AS_PRODUCTION:
        line = pattern.sub(replacement, line)
    return line


def lines_only_in_production(production: Path, test: Path) -> list[str]:
    """The production build's lines that the test build lacks or compiles differently."""
    # blank lines are what an #ifdef leaves behind (gcc -E -P): not code
    prod = [line.strip() for line in production.read_text().splitlines() if line.strip()]
    tested = [as_production(line.strip()) for line in test.read_text().splitlines() if line.strip()]
    matcher = difflib.SequenceMatcher(None, prod, tested, autojunk=False)
    missing = []
    for op, i1, i2, _, _ in matcher.get_opcodes():
        if op in ("replace", "delete"):
            missing += [f"{production.name}: {prod[i]}" for i in range(i1, i2)]
    return missing


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    missing = []
    for production, test in zip(argv[::2], argv[1::2], strict=True):
        missing += lines_only_in_production(Path(production), Path(test))
    for line in missing[:20]:
        print(
            f"c warnings: the test build does not compile this line as the production build: {line}",
            file=sys.stderr,
        )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
