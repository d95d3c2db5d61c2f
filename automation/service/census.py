"""The endpoint census: the interface endpoints each inventory VPC already holds that hubwright did not make.

They use up the same per-VPC quota as hubwright's own (`privateLink.endpointsPerVPC`), so placement must
leave room for them. Before the mapper first resolves, and then every `--endpoint-census-interval` seconds,
`count(hub)` (automation.adapters.aws.lookups.foreign_endpoint_counts, through the service's AWS sessions) runs
and the answer goes to the cache, which re-resolves only when it changed. A count that fails is logged and
the last answer kept. An endpoint already placed stays where it is; the counts move only new ones.
"""
from __future__ import annotations

import logging
from typing import Callable, Mapping

from automation.adapters.loop import Loop
from automation.kit.runtime import Manager
from automation.service.cache import Cache
from stacks.errors import Failure
from stacks.model.hub import HubConfig

LOG = logging.getLogger("hubwright.census")

Count = Callable[[HubConfig], Mapping[str, int]]  # VPC ID -> endpoints there that are not hubwright's


class EndpointCensus(Loop):
    def __init__(self, cache: Cache, count: Count, *, interval: float):
        super().__init__("endpoint-census")
        self.cache, self.count, self.interval = cache, count, interval
        self.failures = 0

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.count_once()

    def count_once(self) -> bool:
        """Count now; True when the cache has a fresh answer."""
        hub = self.cache.hub
        if not isinstance(hub, HubConfig) or not hub.spec.endpoint_vpc_inventory:
            return False
        try:
            counts = self.count(hub)
        except Failure as exc:
            self.failures += 1
            LOG.warning("endpoint census failed (%s): placement keeps the last counts", exc)
            return False
        self.cache.set_foreign_endpoints(counts)
        return True


def setup(manager: Manager, cache: Cache, count: Count | None, *, interval: float) -> EndpointCensus | None:
    """The census on `manager` (None: no count, or an interval of 0): one count once the informers listed, before
    the mapper's first pass, then one every `interval` seconds."""
    if count is None or interval <= 0:
        return None
    census = EndpointCensus(cache, count, interval=interval)

    def first() -> bool:
        census.count_once()
        return True
    manager.on_synced(first)
    manager.runnable(census)
    return census
