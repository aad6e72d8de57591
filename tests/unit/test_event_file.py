"""Cluster events kept across restarts (ingest_api/cluster/event_file.py under ingest_api/cluster/events.py):
format, torn and damaged tails, another version set aside, the bound on the file."""

from __future__ import annotations

import pytest

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.events import ClusterEvents
from lakelog.ingest_api.cluster.event_file import HEADER, EventFile, EventFileError, decode, encode_line


def _fence(image, node):
    image.apply_record({"type": "register_broker", "node_id": node, "broker_epoch": node, "incarnation_id": "i",
                        "host": "127.0.0.1", "port": 9000 + node, "rack": None}, term=1)
    image.apply_record({"type": "unfence_broker", "node_id": node, "broker_epoch": node})


def _events(path, max_events=1000, clock=lambda: 1000.0):
    image = ClusterImage()
    events = ClusterEvents(clock=clock, path=path, max_events=max_events)
    image.observer = events
    return image, events


def test_events_survive_a_restart_and_seq_goes_on(tmp_path):
    path = tmp_path / "cluster-events.log"
    image, events = _events(path)
    _fence(image, 1)
    first = events.recent()
    assert [e["kind"] for e in first] == ["node_unfenced", "node_joined"] and first[0]["seq"] == 2
    # A new process (the node restarted): what it saw before, then new events numbered after them.
    image, again = _events(path, clock=lambda: 2000.0)
    assert again.recent() == first and again.since_ms == 1_000_000
    _fence(image, 2)
    assert [e["seq"] for e in again.recent()] == [4, 3, 2, 1]
    assert again.recent(after_seq=2)[-1]["message"] == "node 2 joined (127.0.0.1:9002)"


def test_a_torn_or_damaged_tail_is_dropped_and_the_rest_kept(tmp_path):
    path = tmp_path / "cluster-events.log"
    good = [{"seq": i, "time_ms": i, "kind": "k", "severity": "info", "message": f"m{i}"} for i in (1, 2, 3)]
    whole = HEADER.encode() + b"".join(encode_line(e) for e in good)
    assert decode(whole) == (good, True)
    torn = whole[:-5]  # the last write did not complete
    assert decode(torn) == (good[:2], False)
    flipped = bytearray(whole)
    flipped[len(HEADER) + 20] ^= 0x01  # a bit of the first event's JSON
    assert decode(bytes(flipped)) == ([], False)
    path.write_bytes(torn)
    f = EventFile(path, 1000)
    assert f.load() == good[:2]
    assert decode(path.read_bytes()) == (good[:2], True)  # rewritten: an append never follows damage
    f.append(good[2])
    assert decode(path.read_bytes()) == (good, True)
    f.close()


def test_another_version_is_refused_and_set_aside(tmp_path):
    with pytest.raises(EventFileError, match="not a cluster events file of version 1"):
        decode(b"lakelog-cluster-events 2\n")
    path = tmp_path / "cluster-events.log"
    path.write_bytes(b"lakelog-cluster-events 2\nwhatever\n")
    _, events = _events(path)
    assert events.recent() == []
    assert (tmp_path / "cluster-events.log.bad").read_bytes().startswith(b"lakelog-cluster-events 2")
    assert path.read_bytes() == HEADER.encode()


def test_the_file_stays_bounded(tmp_path):
    path = tmp_path / "cluster-events.log"
    image, events = _events(path, max_events=5)
    for node in range(1, 30):
        _fence(image, node)  # two events each
        lines = path.read_bytes().count(b"\n") - 1
        assert lines < 2 * 5
    kept, clean = decode(path.read_bytes())
    assert clean and kept[-1]["seq"] == 58 and len(kept) <= 9
    _, again = _events(path, max_events=5)
    assert [e["seq"] for e in again.recent()] == [58, 57, 56, 55, 54]
