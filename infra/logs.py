"""Log records for people and for machines: one JSON object per line, repeats rate-limited, notices marked.

A node logs JSON lines (`JsonLogFormatter`: ts, level, logger, msg, and `exc` / `notice` when set).
`lakelog up` keeps every node's lines in the node's data directory and shows a person only the
notices (`log.info(..., extra=NOTICE)`: a node started, became the controller, registered, stopped)
and warnings and errors, as `human_line` renders them.

`RepeatFilter` bounds how often one message is logged: at most `burst` records per key in a
`window_s` window; the records past that are dropped and counted, and the next record of that key
after the window says how many were suppressed. The key is the logger, level and message text —
exact (`exact_key`: a node's own log, which must still name each partition) or with its numbers
blanked (`template_key`: a console, where "a-3: ..." and "a-4: ..." are one kind of event). Keys are
bounded (`max_keys`, least recently seen forgotten first), so the filter's memory is too.
"""

from __future__ import annotations

import collections
import json
import logging
import re
import time
from typing import Any, Callable

#: `extra=NOTICE` marks a record worth a person's attention on a console (see `is_notice`).
NOTICE: dict[str, Any] = {"notice": True}

DEFAULT_BURST = 10
DEFAULT_WINDOW_S = 10.0
DEFAULT_MAX_KEYS = 4096

_NUMBER = re.compile(r"\d+")


def exact_key(logger: str, level: str, message: str) -> tuple[str, str, str]:
    return logger, level, message


def template_key(logger: str, level: str, message: str) -> tuple[str, str, str]:
    return logger, level, _NUMBER.sub("#", message)


class RepeatLimiter:
    """The rate-limiting rule of `RepeatFilter`, over plain (logger, level, message) triples.

    Not thread-safe: the caller serializes (a logging handler holds its lock; the launcher calls
    it from one thread per node).
    """

    def __init__(self, *, burst: int = DEFAULT_BURST, window_s: float = DEFAULT_WINDOW_S,
                 max_keys: int = DEFAULT_MAX_KEYS,
                 key: Callable[[str, str, str], tuple] = exact_key,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or window_s <= 0 or max_keys < 1:
            raise ValueError("burst and max_keys must be >= 1 and window_s > 0")
        self.burst, self.window_s, self.max_keys = burst, window_s, max_keys
        self._key = key
        self._clock = clock
        #: key -> [window start, records let through in it, records suppressed since the last one let through]
        self._seen: collections.OrderedDict[tuple, list] = collections.OrderedDict()

    def admit(self, logger: str, level: str, message: str) -> tuple[bool, int]:
        """(let it through?, how many records of its key were suppressed before it)."""
        k = self._key(logger, level, message)
        now = self._clock()
        state = self._seen.get(k)
        if state is None:
            state = self._seen[k] = [now, 0, 0]
            while len(self._seen) > self.max_keys:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(k)
        if now - state[0] >= self.window_s:
            state[0], state[1] = now, 0
        if state[1] >= self.burst:
            state[2] += 1
            return False, 0
        state[1] += 1
        suppressed, state[2] = state[2], 0
        return True, suppressed


    def drain_suppressed(self) -> list[tuple[tuple, int]]:
        """(key, count) of the keys whose window has ended with records suppressed; their counts restart.

        For a caller that reports suppressions on its own schedule (a console) rather than on the
        key's next record, which may never come.
        """
        now = self._clock()
        out = []
        for k, state in self._seen.items():
            if state[2] and now - state[0] >= self.window_s:
                out.append((k, state[2]))
                state[2] = 0
        return out


def suppressed_note(count: int, window_s: float) -> str:
    return f" [{count} similar message(s) suppressed; at most a few per {window_s:g} s]"


class RepeatFilter(logging.Filter):
    """A handler filter: the records of one key past `burst` per `window_s` are dropped (see the module doc)."""

    def __init__(self, **limits: Any) -> None:
        super().__init__()
        self.limiter = RepeatLimiter(**limits)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        ok, suppressed = self.limiter.admit(record.name, record.levelname, message)
        if ok and suppressed:
            record.msg, record.args = message + suppressed_note(suppressed, self.limiter.window_s), None
        return ok


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg (+ exc, + notice)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        if getattr(record, "notice", False):
            doc["notice"] = True
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def parse_json_line(line: str) -> dict[str, Any] | None:
    """A `JsonLogFormatter` line as a dict, or None for anything else (a stray print, a fatal error)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "msg" in doc and "level" in doc else None


def is_notice(doc: dict[str, Any]) -> bool:
    """Worth a person's attention: marked a notice, or a warning or worse."""
    return bool(doc.get("notice")) or doc.get("level") in ("WARNING", "ERROR", "CRITICAL")


def human_line(source: str, doc: dict[str, Any]) -> str:
    """`16:32:53 node-3  message` (the level named when it is not INFO; an exception's last line added)."""
    ts = str(doc.get("ts", ""))
    clock = ts[11:19] if len(ts) >= 19 else time.strftime("%H:%M:%S")
    level = doc.get("level", "INFO")
    text = f"{clock} {source:<7} {'' if level == 'INFO' else level + ' '}{doc.get('msg', '')}"
    exc = str(doc.get("exc") or "").strip().splitlines()
    if exc:
        text += f" ({exc[-1]})"
    return text
