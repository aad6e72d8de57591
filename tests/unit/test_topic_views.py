"""The SQL server's views registered on demand (spark_log/sql_server/topic_views.py) and `lakelog sql` over
Spark Connect waiting for a new topic's view (spark_log/sql_cli/command.py), with fakes for Spark and
the nodes."""

from __future__ import annotations

import argparse
import threading

from lakelog.spark_log.sql_cli import command as cli_sql
from lakelog.spark_log.sql_server.topic_views import TopicViews


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_missing_view_is_registered_before_the_query_and_lookups_are_bounded():
    topics = ["orders"]
    calls = []

    def register():
        calls.append(list(topics))
        return list(topics)

    clock = FakeClock()
    views = TopicViews(register, min_interval_s=0.5, clock=clock)
    assert views.refresh() == ["orders"]
    assert views.ensure(["orders"]) == [] and len(calls) == 1  # known: no lookup
    topics.append("fresh")  # created since the last refresh
    assert views.ensure(["Fresh", "orders"]) == []
    assert len(calls) == 2 and views.names == ["fresh", "orders"]
    clock.now += 0.5
    assert views.ensure(["nope"]) == ["nope"] and len(calls) == 3
    assert views.ensure(["nope"]) == ["nope"] and len(calls) == 3, "a lookup at most every min_interval_s"
    clock.now += 0.5
    assert views.ensure(["nope"]) == ["nope"] and len(calls) == 4


def test_a_refresh_in_flight_serves_the_query_waiting_on_it():
    started, release = threading.Event(), threading.Event()
    calls = []

    def register():
        calls.append(1)
        if len(calls) == 1:
            started.set()
            release.wait(10)
        return ["fresh"]

    views = TopicViews(register)
    t = threading.Thread(target=views.refresh)
    t.start()
    started.wait(10)
    release.set()
    assert views.ensure(["fresh"]) == []
    t.join(10)
    assert len(calls) == 1, "the query used the refresh in flight"


def test_lakelog_sql_over_spark_connect_waits_for_the_servers_refresh(monkeypatch):
    from lakelog.spark_log import hot_tail

    monkeypatch.setattr(hot_tail, "list_topics", lambda access: ["fresh", "orders"])
    monkeypatch.setattr(cli_sql, "NEW_VIEW_POLL_S", 0.001)
    answers = iter([["orders"], ["orders"], ["fresh", "orders"]])
    monkeypatch.setattr(cli_sql, "_server_names", lambda spark, args: next(answers))
    args = argparse.Namespace(query="SELECT * FROM lakelog.fresh JOIN lakelog.orders", nodes="http://127.0.0.1:1")
    assert cli_sql._await_new_views(None, args, ["orders"]) == ["fresh", "orders"]
    # A name no node knows is not waited for.
    monkeypatch.setattr(cli_sql, "_server_names", lambda spark, args: (_ for _ in ()).throw(AssertionError("asked")))
    args.query = "SELECT * FROM lakelog.nope"
    assert cli_sql._await_new_views(None, args, ["orders"]) == ["orders"]
