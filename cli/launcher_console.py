"""The terminal of `lakelog up`: the launcher's own lines, and from its children only what a person
should see (notices, warnings and errors as one human line each, repeats rate-limited:
infra/logs.py); `--verbose` forwards every child line instead."""

from __future__ import annotations

import collections
import threading
import time
from typing import IO

from lakelog.infra.logs import RepeatLimiter, human_line, is_notice, parse_json_line, template_key

#: The console shows at most CONSOLE_BURST node lines of one kind (numbers blanked) per window.
CONSOLE_BURST = 3
#: ... and at most CONSOLE_NODE_BURST warnings or errors of one node per window.
CONSOLE_NODE_BURST = 6
CONSOLE_WINDOW_S = 10.0


class Console:
    """The launcher's terminal: its own lines, and the node lines worth a person's attention, one lock.

    Node lines are rate-limited twice: per kind (numbers blanked, CONSOLE_BURST per window) and, for
    warnings and errors, per node (CONSOLE_NODE_BURST per window), so that a recovery that warns
    about every partition shows a few lines and a count, not a screenful. `flush_suppressed` prints
    those counts once their window is over.
    """

    def __init__(self, out: IO[str], *, verbose_out: IO[bytes] | None = None) -> None:
        self.out = out
        #: --verbose: every node line, as the node printed it (JSON), prefixed with the node's name.
        self.verbose_out = verbose_out
        self._lock = threading.Lock()
        self._kinds = RepeatLimiter(burst=CONSOLE_BURST, window_s=CONSOLE_WINDOW_S, key=template_key)
        self._per_node = RepeatLimiter(burst=CONSOLE_NODE_BURST, window_s=CONSOLE_WINDOW_S,
                                       key=lambda source, level, _msg: (source,))

    def say(self, text: str) -> None:
        with self._lock:
            self._print(text)

    def _print(self, text: str) -> None:
        try:
            print(text, file=self.out, flush=True)
        except (OSError, ValueError):  # the terminal went away; the nodes' own logs still have it all
            pass

    def node_line(self, source: str, line: bytes) -> None:
        if self.verbose_out is not None:
            with self._lock:
                try:
                    self.verbose_out.write(f"{source} | ".encode() + line)
                    self.verbose_out.flush()
                except (OSError, ValueError):
                    self.verbose_out = None
            return
        doc = parse_json_line(line.decode("utf-8", "replace"))
        if doc is None or not is_notice(doc):
            return
        level, msg = str(doc.get("level")), str(doc.get("msg"))
        with self._lock:
            ok, _ = self._kinds.admit(source, level, msg)
            if ok and not doc.get("notice"):
                ok, _ = self._per_node.admit(source, level, msg)
            if ok:
                self._print(human_line(source, doc))

    def flush_suppressed(self) -> None:
        """One line per node whose lines were held back in a window that has ended."""
        with self._lock:
            counts: collections.Counter[str] = collections.Counter()
            for limiter in (self._kinds, self._per_node):
                for key, n in limiter.drain_suppressed():
                    counts[key[0]] += n
            for source, n in sorted(counts.items()):
                self._print(f"{time.strftime('%H:%M:%S')} {source:<7} ... and {n} more line(s) like these "
                            f"(see its log file)")
