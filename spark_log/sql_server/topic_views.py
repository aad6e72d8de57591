"""The `lakelog.<name>` views of a long-lived SQL server, refreshed now and then and on demand.

    views = TopicViews(lambda: register_topics(spark, remote, nodes=nodes))
    views.refresh()                      # the server's loop, every --refresh-ms
    views.ensure(["orders"])             # a query names lakelog.orders: registered first if missing

A topic created a moment ago has no view until the next refresh. A query that names a
`lakelog.<name>` the server has not registered does not fail for that: `ensure` refreshes first
(the nodes list the topics; every view is registered again), so the first query of a new topic
answers. Refreshes on demand are at most one per `min_interval_s` (a query naming a table that
does not exist does not make every query list the topics), and one at a time: a caller that finds
one in flight waits for it and uses its result.

Concurrency: thread-safe; `refresh` holds a lock for the registration (queries of the HTTP
endpoint, the console and the server's loop call it from their own threads).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

#: Fewest seconds between two refreshes asked for by queries.
MIN_ON_DEMAND_INTERVAL_S = 0.5


class TopicViews:
    """The registered view names and the registration (see the module docstring)."""

    def __init__(self, register: Callable[[], list[str]], *, min_interval_s: float = MIN_ON_DEMAND_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._register = register
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._names: frozenset[str] = frozenset()
        self._last_on_demand = float("-inf")

    @property
    def names(self) -> list[str]:
        return sorted(self._names)

    def refresh(self) -> list[str]:
        """Register every view again (the register callable's errors propagate); the names."""
        with self._lock:
            names = self._register()
            self._names = frozenset(n.lower() for n in names)
            return sorted(names)

    def missing(self, names: Iterable[str]) -> list[str]:
        """Those of `names` not registered (case-insensitive, as Spark resolves them)."""
        known = self._names
        return sorted({n.lower() for n in names} - known)

    def ensure(self, names: Iterable[str]) -> list[str]:
        """Refresh if any of `names` is not registered (at most once per `min_interval_s`); the
        names still missing after it."""
        wanted = list(names)
        if not self.missing(wanted):
            return []
        with self._lock:
            if not self.missing(wanted):  # a refresh in flight registered them meanwhile
                return []
            now = self._clock()
            if now - self._last_on_demand < self.min_interval_s:
                return self.missing(wanted)
            self._last_on_demand = now
            self._names = frozenset(n.lower() for n in self._register())
        return self.missing(wanted)
