"""MkDocs hook: the docstrings' Sphinx roles (:class:`~shmwin.errors.NotSupportedError`),
which mkdocstrings leaves as text before the code, are shown as the code alone, with its
last dotted part only when the role asks for it (``~``)."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|meth|func|attr|data|exc|mod|obj):<code>(~?)([^<]*)</code>")


def _plain(m: re.Match[str]) -> str:
    short, target = m.groups()
    return f"<code>{target.rpartition('.')[2] if short else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(_plain, html)
