"""Scrapes of an app's prometheus_client metrics kept by shmwin (tests/integration/metrics/; the
``app`` fixture is in tests/conftest.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import shmwin.integrations.prometheus as shp

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(app: str) -> str:
    registry = CollectorRegistry()
    shp.MultiProcessCollector(registry, app)
    return generate_latest(registry).decode()


def samples(app: str) -> Samples:
    """Every sample of a scrape, by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(scrape(app)) for s in family.samples}  # fmt: skip
