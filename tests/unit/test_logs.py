"""Log rate limiting and the console rendering of node log lines (infra/logs.py), restart backoffs."""

from __future__ import annotations

import io
import json
import logging

from lakelog.cli.launcher import RestartState, command_hint
from lakelog.cli.launcher_children import Backoff
from lakelog.cli.launcher_console import Console
from lakelog.infra.logs import (NOTICE, JsonLogFormatter, RepeatFilter, RepeatLimiter, human_line, is_notice,
                                parse_json_line, template_key)
from lakelog.ingest_api.cluster.backoff import RetryBackoff


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_repeat_limiter_lets_a_burst_through_then_counts_until_the_window_ends():
    clock = Clock()
    lim = RepeatLimiter(burst=2, window_s=10, clock=clock)
    got = [lim.admit("n", "INFO", "same") for _ in range(5)]
    assert got == [(True, 0), (True, 0), (False, 0), (False, 0), (False, 0)]
    assert lim.admit("n", "INFO", "other") == (True, 0)  # another message has its own budget
    clock.t += 10
    assert lim.admit("n", "INFO", "same") == (True, 3)  # the first one after the window says how many went
    assert lim.admit("n", "INFO", "same") == (True, 0)


def test_template_key_blanks_numbers_and_drain_reports_ended_windows():
    clock = Clock()
    lim = RepeatLimiter(burst=1, window_s=5, key=template_key, clock=clock)
    assert lim.admit("n", "WARNING", "a-1 recovered 3")[0]
    assert not lim.admit("n", "WARNING", "a-2 recovered 7")[0]
    assert lim.drain_suppressed() == []  # the window is not over
    clock.t += 5
    assert lim.drain_suppressed() == [(("n", "WARNING", "a-# recovered #"), 1)]
    assert lim.drain_suppressed() == []


def test_repeat_limiter_forgets_the_oldest_keys_past_max_keys():
    lim = RepeatLimiter(burst=1, window_s=60, max_keys=2, clock=Clock())
    for m in ("x", "y", "z"):
        assert lim.admit("n", "INFO", m)[0]
    assert lim.admit("n", "INFO", "x")[0]  # forgotten, so admitted again
    assert not lim.admit("n", "INFO", "z")[0]


def test_repeat_filter_on_a_handler_and_the_json_notice_field():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(RepeatFilter(burst=3, window_s=60))
    logger = logging.getLogger("lakelog.test.repeat")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for _ in range(100):
            logger.info("%s: follower of node %d in epoch %d", "a-0", -1, 7)
        logger.info("node %d started", 1, extra=NOTICE)
    finally:
        logger.removeHandler(handler)
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["msg"] for d in docs] == ["a-0: follower of node -1 in epoch 7"] * 3 + ["node 1 started"]
    assert docs[-1]["notice"] is True and "notice" not in docs[0]
    assert is_notice(docs[-1]) and not is_notice(docs[0])


def test_human_line_and_parse():
    doc = parse_json_line('{"ts": "2026-11-25T16:36:29.123Z", "level": "WARNING", "logger": "x", "msg": "hi", '
                          '"exc": "Traceback\\n  ...\\nValueError: bad"}')
    assert human_line("node-2", doc) == "16:36:29 node-2  WARNING hi (ValueError: bad)"
    assert parse_json_line("Traceback (most recent call last):") is None
    assert parse_json_line("{not json") is None


def test_console_shows_notices_and_a_few_warnings_per_node_then_a_count():
    out = io.StringIO()
    console = Console(out)
    line = lambda level, msg, **kw: json.dumps({"ts": "2026-11-25T16:00:00.000Z", "level": level, "logger": "l",
                                                "msg": msg, **kw}).encode() + b"\n"
    console.node_line("node-1", line("INFO", "a-0: leader in epoch 3"))  # not for a person
    console.node_line("node-1", line("INFO", "node 1 started", notice=True))
    for t in "abcdefghij":
        for p in range(5):
            console.node_line("node-1", line("WARNING", f"partition {t}-{p} recovered"))
    shown = out.getvalue().splitlines()
    assert shown[0] == "16:00:00 node-1  node 1 started"
    assert 1 < len(shown) <= 1 + 6 and all("recovered" in s for s in shown[1:])
    for limiter in (console._kinds, console._per_node):  # end the window
        for state in limiter._seen.values():
            state[0] -= 60
    console.flush_suppressed()
    assert out.getvalue().splitlines()[-1].endswith(f"node-1  ... and {50 - (len(shown) - 1)} more line(s) "
                                                    "like these (see its log file)")


def test_verbose_console_forwards_every_line():
    raw = io.BytesIO()
    console = Console(io.StringIO(), verbose_out=raw)
    console.node_line("node-3", b'{"level": "INFO", "msg": "x"}\n')
    assert raw.getvalue() == b'node-3 | {"level": "INFO", "msg": "x"}\n'


def test_restart_backoff_doubles_to_a_cap_and_starts_over_after_a_stable_run():
    b = Backoff(initial_s=1, max_s=8, stable_s=60)
    assert [b.after_run(1) for _ in range(5)] == [1, 2, 4, 8, 8]
    assert b.after_run(120) == 1


def test_restart_state_schedules_a_restart_after_the_backoff_and_counts_it():
    r = RestartState()
    assert not r.pending and not r.due(0.0)
    assert r.schedule(100.0, ran_s=1.0) == 1.0
    assert r.pending and not r.due(100.5) and r.due(101.0)
    r.restarted()
    assert (r.pending, r.restarts, r.coming_back) == (False, 1, True)
    assert r.schedule(200.0, ran_s=1.0) == 2.0  # a child that keeps dying waits longer
    r.cancel()
    assert not r.pending and not r.due(300.0)


def test_retry_backoff_of_refused_requests():
    b = RetryBackoff(initial_s=0.1, max_s=0.4)
    assert b.may_send("k", 0.0)
    assert b.refused("k", 0.0) == 0.1
    assert not b.may_send("k", 0.05) and b.may_send("k", 0.1)
    assert b.refused("k", 0.1) == 0.2 and b.refused("k", 0.3) == 0.4 and b.refused("k", 0.7) == 0.4
    b.accepted("k")
    assert b.may_send("k", 0.7) and b.refused("k", 0.7) == 0.1


def test_command_hint_names_the_path_when_lakelog_is_not_on_the_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    hint = command_hint(cwd=tmp_path)
    assert hint.endswith("lakelog") and hint != "lakelog"
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert command_hint() == "lakelog"
