"""Per-key retry backoff for requests the controller refused (ISR changes, ...).

A refused request is not sent again for that key before `initial_s`, doubling per refusal up to
`max_s`; an accepted one clears the key. Without it a leader re-sends a refused ISR expansion on
every follower fetch, several times a millisecond, until the metadata that explains the refusal
arrives. At most `max_keys` keys are remembered (the oldest are forgotten: they may retry at once).
Not thread-safe: used from the node's event loop.
"""

from __future__ import annotations

import collections
from typing import Hashable

DEFAULT_INITIAL_S = 0.1
DEFAULT_MAX_S = 2.0
DEFAULT_MAX_KEYS = 100_000


class RetryBackoff:
    def __init__(self, *, initial_s: float = DEFAULT_INITIAL_S, max_s: float = DEFAULT_MAX_S,
                 max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if not 0 < initial_s <= max_s or max_keys < 1:
            raise ValueError("0 < initial_s <= max_s and max_keys >= 1")
        self.initial_s, self.max_s, self.max_keys = initial_s, max_s, max_keys
        #: key -> (monotonic time before which it waits, the delay used)
        self._until: collections.OrderedDict[Hashable, tuple[float, float]] = collections.OrderedDict()

    def may_send(self, key: Hashable, now: float) -> bool:
        entry = self._until.get(key)
        return entry is None or now >= entry[0]

    def refused(self, key: Hashable, now: float) -> float:
        """Note a refusal at `now`; returns the delay before the key may be sent again."""
        prev = self._until.pop(key, None)
        delay = self.initial_s if prev is None else min(self.max_s, prev[1] * 2)
        self._until[key] = (now + delay, delay)
        while len(self._until) > self.max_keys:
            self._until.popitem(last=False)
        return delay

    def accepted(self, key: Hashable) -> None:
        self._until.pop(key, None)
