"""Audit lines of client security (logger `lakelog.audit`): every refusal, rate-bounded, and every
user, API key and ACL change. Audit lines never carry a password, key or secret."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

audit_log = logging.getLogger("lakelog.audit")


class AuditLog:
    """Audit lines, at most `per_second` refusals a second (a flood is summarised, not written out)."""

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self._second = 0
        self._count = 0
        self.suppressed = 0

    def refusal(self, event: str, **fields: Any) -> None:
        now = int(time.monotonic())
        if now != self._second:
            if self.suppressed:
                audit_log.warning("audit %s", json.dumps({"event": "suppressed", "count": self.suppressed}))
                self.suppressed = 0
            self._second, self._count = now, 0
        self._count += 1
        if self._count > self.per_second:
            self.suppressed += 1
            return
        audit_log.warning("audit %s", json.dumps({"event": event, **fields}, sort_keys=True, default=str))

    @staticmethod
    def change(event: str, **fields: Any) -> None:
        audit_log.info("audit %s", json.dumps({"event": event, **fields}, sort_keys=True))
