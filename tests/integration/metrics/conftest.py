"""The metrics tests' fixture: an app name unique to the test, prometheus_client's value class put
back after it, and the app's segment removed and checked gone (make_name's leak check)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import values

import shmwin.integrations.prometheus as shp


@pytest.fixture
def app(make_name) -> Iterator[str]:
    name = make_name("app")
    before = values.ValueClass
    yield name
    values.ValueClass = before
    shp.reset(name)
