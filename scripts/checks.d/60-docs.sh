#!/usr/bin/env bash
# The docs site (docs/, mkdocs.yml): `mkdocs build --strict` into site/, so a broken link,
# anchor or API reference fails scripts/test. The tools, pinned in docs/requirements.txt,
# go into .venv-docs: a link into the dev cache (scripts/_devcache.sh: made once per machine and
# content of that file; SHMWIN_DEV_CACHE=off: made in the checkout, once per clone and change of
# that file); the API page reads shmwin's source with griffe, so nothing is compiled here.
# stage: beside the suite (one core at most: scripts/test runs it while pytest runs)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_devcache.sh
start=$SECONDS
# _docs_venv PYTHON DIR: the toolchain's venv
_docs_venv() {
  echo "docs: installing the docs toolchain (docs/requirements.txt) into $2 ..."
  # Made without pip, .venv's pip installing into it (ensurepip: 2 to 3 CPU-s), and not compiled:
  # pip compiled every module of the toolchain (pygments' hundreds of lexers among them), and
  # the one mkdocs process that uses it compiles only what it imports. The job from a fresh
  # clone (CI): 17.0 CPU-s before, 14.0 after; with .venv-docs kept and PYTHONDONTWRITEBYTECODE
  # set, 2.9 before, 4.1 after (each run compiles what it imports). Measured under load 18-20.
  "$1" -m venv --without-pip "$2"
  if ! .venv/bin/python -m pip --python "$2/bin/python" install -q --no-compile --disable-pip-version-check \
      -r docs/requirements.txt >"$2/install.log" 2>&1; then
    cat "$2/install.log" >&2; echo "docs: pip install failed (log above)" >&2; return 1
  fi
}
python=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)')
venv=$(shmwin_devcache --link .venv-docs venv-docs 0 "$python $(cat docs/requirements.txt)" _docs_venv "$python")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --clean --site-dir site >"$log" 2>&1; then
  cat "$log" >&2; echo "docs: mkdocs build --strict failed (above)" >&2; exit 1
fi
pages=$(find site -name index.html | wc -l)
echo "docs: mkdocs build --strict: $pages pages in site/, no warnings ($((SECONDS - start)) s)"
