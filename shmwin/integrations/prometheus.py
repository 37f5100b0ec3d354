"""A prometheus_client collector that reads shmwin windows straight from shared memory.

    from prometheus_client import REGISTRY
    from shmwin.integrations.prometheus import ShmwinCollector
    REGISTRY.register(ShmwinCollector())            # every window on the host
    REGISTRY.register(ShmwinCollector(["api"]))     # or just these

Each scrape attaches, reads lock-free and detaches: no per-process files, nothing
that grows when workers are recycled (prometheus_client's multiprocess mode
keeps a file per pid), and a window that disappears simply stops being exported.

Exported, per window x field x resolution (x key, for the busiest ``top`` keys of
a keyed window): ``shmwin_window_total`` and ``shmwin_window_rate_per_second``,
both gauges over that resolution's whole span.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .. import metrics
from ..errors import ShmwinError
from ..segment import names as all_names


class ShmwinCollector(Collector):
    def __init__(self, names: Iterable[str] | None = None, top: int = 100):
        self._names = list(names) if names is not None else None
        self._top = top

    def collect(self) -> Iterator[Metric]:
        families = {name: Metric(name, text, "gauge") for name, text in metrics.HELP.items()}
        for name in self._names if self._names is not None else all_names():
            try:
                w = metrics.open_window(name)
            except (ShmwinError, OSError):
                continue  # gone or unreadable: `shmwin ls` says why
            try:
                for sample in metrics.samples(w, top=self._top):
                    families[sample.metric].add_sample(sample.metric, sample.labels, sample.value)
            finally:
                w.close()
        yield from families.values()
