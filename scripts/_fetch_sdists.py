"""Download the sdists of the given releases (DIST==VERSION) into DEST, all at once.

    python scripts/_fetch_sdists.py DEST DIST==VERSION ...

Used by scripts/_sdist_tests.sh (the peer suites ship in their sdists). `pip download
--no-binary :all: --no-deps` did this one sdist per process, and for each one built an isolated
env with the sdist's build backend to prepare its metadata, which nothing here reads: 13 s and
3 CPU-s a sdist, one after another (the set-up steps: 31 s, 13 CPU-s for five). Here each file
is found in the index's JSON listing (PEP 691: PIP_INDEX_URL, else PyPI) and checked against the
sha256 the index gives, in parallel threads: the wait is the network's, and the CPU a few tenths.
Exit 1 on any failure (said on stderr), so that the caller can fall back to pip download.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

JSON_LISTING = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 60


def normalized(name: str) -> str:
    """PEP 503's form of a project name: the index's folder, and how sdist names compare."""
    return re.sub(r"[-_.]+", "-", name).lower()


def tls_context() -> ssl.SSLContext:
    # the CA bundle pip is told to use here (PIP_CERT), else the system's
    return ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)


def sdist_of(index: str, dist: str, version: str, context: ssl.SSLContext) -> tuple[str, str, str]:
    """The (filename, url, sha256) of DIST VERSION's sdist, from the index's JSON listing."""
    listing_url = f"{index.rstrip('/')}/{normalized(dist)}/"
    request = urllib.request.Request(listing_url, headers={"Accept": JSON_LISTING})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
        listing = json.load(response)
    for entry in listing["files"]:
        filename = entry["filename"]
        if not filename.endswith(".tar.gz"):
            continue
        name, _, file_version = filename[: -len(".tar.gz")].rpartition("-")
        if normalized(name) == normalized(dist) and file_version == version:
            return filename, entry["url"], entry["hashes"]["sha256"]
    raise LookupError(f"the index lists no sdist of {dist} {version}")


def fetch(index: str, requirement: str, dest: Path, context: ssl.SSLContext) -> Path:
    dist, _, version = requirement.partition("==")
    filename, url, sha256 = sdist_of(index, dist, version, context)
    with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=context) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{filename}: its sha256 is not the index's")
    target = dest / filename
    target.write_bytes(data)
    return target


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not all("==" in requirement for requirement in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    dest, requirements = Path(argv[0]), argv[1:]
    dest.mkdir(parents=True, exist_ok=True)
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    context = tls_context()
    failed = 0
    with ThreadPoolExecutor(max_workers=len(requirements)) as pool:
        futures = {wanted: pool.submit(fetch, index, wanted, dest, context) for wanted in requirements}
        for requirement, future in futures.items():
            try:
                future.result()
            except Exception as exc:  # each failure said, then the caller falls back to pip
                print(f"fetch sdists: {requirement}: {type(exc).__name__}: {exc}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
