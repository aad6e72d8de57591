"""Consumer instance settings and limits, without a node process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.groups.consumer import ConsumerManager
from lakelog.ingest_api.groups.consumer_config import validate_name
from lakelog.ingest_api.groups.errors import ConsumerAlreadyExistsError, ConsumerInstanceNotFoundError, TooManyInstancesError


def manager(**config: str) -> ConsumerManager:
    node = SimpleNamespace(node_id=1, config=NodeConfig(config), image=SimpleNamespace(topics={}, brokers={}))
    return ConsumerManager(node, groups=None)  # type: ignore[arg-type]


def test_defaults_and_bounds_of_instance_settings():
    m = manager(**{"group.min.session.timeout.ms": "1000", "consumer.max.poll.records": "100"})
    cfg = m.parse_config({})
    assert (cfg.format, cfg.auto_offset_reset, cfg.auto_commit_enable, cfg.strategies) == (
        "binary", "latest", True, ("range",))
    assert cfg.session_timeout_ms == 10_000 and cfg.heartbeat_interval_ms == 3000 and cfg.max_poll_records == 100
    cfg = m.parse_config({"format": "JSON", "auto.offset.reset": "smallest", "auto.commit.enable": "false",
                          "session.timeout.ms": 1500, "partition.assignment.strategy": "sticky,roundrobin"})
    assert (cfg.format, cfg.auto_offset_reset, cfg.auto_commit_enable, cfg.strategies) == (
        "json", "earliest", False, ("sticky", "roundrobin"))
    assert cfg.heartbeat_interval_ms == 500  # a third of the session when the default would not fit
    for bad in ({"format": "thrift"}, {"auto.offset.reset": "never"}, {"auto.commit.enable": "yes"},
                {"session.timeout.ms": 999}, {"session.timeout.ms": True}, {"max.poll.records": 101},
                {"heartbeat.interval.ms": 0}, {"partition.assignment.strategy": "fair"}):
        with pytest.raises(InvalidRequestError):
            m.parse_config(bad)


def test_instance_limits_and_names():
    m = manager(**{"consumer.max.instances": "2"})
    cfg = m.parse_config({})
    m.create("g", "a", cfg)
    with pytest.raises(ConsumerAlreadyExistsError):
        m.create("g", "a", cfg)
    m.create("other-group", "a", cfg)  # names are per group
    with pytest.raises(TooManyInstancesError):
        m.create("g", "b", cfg)
    assert m.get("g", "a").name == "a"
    with pytest.raises(ConsumerInstanceNotFoundError):
        m.get("g", "b")
    assert m.new_name() != m.new_name()
    for bad in ("", "a/b", "x" * 250, "caf\u00e9", "a b"):
        with pytest.raises(InvalidRequestError):
            validate_name(bad, "name")
