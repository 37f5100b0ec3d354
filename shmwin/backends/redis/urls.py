"""Pieces of the Redis-side URLs shared by the cluster and sentinel spellings."""

from __future__ import annotations

import urllib.parse


def host_ports(url: str, default_port: int, what: str) -> list[tuple[str, int]]:
    """The ``host:port[,host:port...]`` list of a URL's network location (after any credentials)."""
    nodes = []
    for seed in urllib.parse.urlsplit(url).netloc.rpartition("@")[2].split(","):
        host, colon, port = seed.rpartition(":")
        if not colon or "]" in port:  # no port, or a bare [v6] address
            host, port = seed, str(default_port)
        if not host or not port.isdigit():
            raise ValueError(f"{what} is host:port, not {seed!r} (in {url!r})")
        nodes.append((host.strip("[]"), int(port)))
    return nodes
