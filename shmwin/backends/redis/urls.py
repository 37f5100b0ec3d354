"""Pieces of the Redis-side URLs shared by the cluster and sentinel spellings."""

from __future__ import annotations

import urllib.parse


def split_url(url: str) -> urllib.parse.SplitResult:
    """``urllib.parse.urlsplit(url)``, for URLs whose network location may list several hosts
    (``host:port,[::1]:port``): CPython 3.14.10 (like later patch releases of the others) refuses a
    location with anything before a ``[``, so the hosts are split off first and put back whole
    (``host_ports`` checks them one by one). ``username`` and ``password`` read as urlsplit's."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return urllib.parse.urlsplit(url)
    cut = min((at for at in map(rest.find, "/?#") if at >= 0), default=len(rest))
    return urllib.parse.urlsplit(f"{scheme}://host{rest[cut:]}")._replace(netloc=rest[:cut])


def host_ports(url: str, default_port: int, what: str) -> list[tuple[str, int]]:
    """The ``host:port[,host:port...]`` list of a URL's network location (after any credentials)."""
    nodes = []
    for seed in split_url(url).netloc.rpartition("@")[2].split(","):
        host, colon, port = seed.rpartition(":")
        if not colon or "]" in port:  # no port, or a bare [v6] address
            host, port = seed, str(default_port)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{what} is host:port, not {seed!r} (in {url!r})")
        nodes.append((host.strip("[]"), int(port)))
    return nodes
