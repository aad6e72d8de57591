"""The steps the group and transaction services share through `CoordinatorPartitions`: creating the
coordinator topic on first use, relaying a call to the coordinating node, and retrying it."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from lakelog.infra import error_codes
from lakelog.ingest_api.errors import NotReadyError, RemoteError, TopicExistsError
from lakelog.ingest_api.replication.coordinator_partitions import CoordinatorPartitions, retry_until

TOPIC_EXISTS = error_codes.code(TopicExistsError.__name__).error_code


class _Admin:
    def __init__(self, image, fail: Exception | None = None) -> None:
        self.image, self.fail, self.calls = image, fail, []

    async def create_topic(self, name, *, partitions, replication_factor, configs):
        self.calls.append((name, partitions, replication_factor, configs))
        await asyncio.sleep(0.01)  # a concurrent caller waits on the lock meanwhile
        if self.fail is not None:
            raise self.fail
        self.image.topics[name] = SimpleNamespace(partitions=[])


def _hosting(live_brokers: int, fail: Exception | None = None) -> tuple[CoordinatorPartitions, _Admin]:
    image = SimpleNamespace(topics={}, brokers={b: SimpleNamespace(fenced=False) for b in range(1, live_brokers + 1)})
    admin = _Admin(image, fail)
    node = SimpleNamespace(image=image, admin=admin)
    hosting = CoordinatorPartitions(node, "__coordinator", 7, what="keys", read=lambda log, p: None,
                                    replay=lambda p, e, x: 0, reset=lambda p: None)
    return hosting, admin


def test_ensure_topic_creates_once_compacted_with_the_rf_capped_at_the_live_brokers():
    hosting, admin = _hosting(live_brokers=2)

    async def main():
        await asyncio.gather(*(hosting.ensure_topic(replication_factor=3, min_insync=lambda rf: min(rf, 2),
                                                    segment_bytes=1234) for _ in range(3)))
        await hosting.ensure_topic(replication_factor=3, min_insync=lambda rf: rf, segment_bytes=1)

    asyncio.run(main())
    assert admin.calls == [("__coordinator", 7, 2, {"cleanup.policy": "compact", "segment.bytes": "1234",
                                                    "min.insync.replicas": "2"})]


@pytest.mark.parametrize("fail", [TopicExistsError("exists"), RemoteError(400, TOPIC_EXISTS, "exists elsewhere")])
def test_ensure_topic_takes_a_topic_another_node_created_first_as_there(fail):
    hosting, admin = _hosting(live_brokers=3, fail=fail)
    asyncio.run(hosting.ensure_topic(replication_factor=3, min_insync=lambda rf: 2, segment_bytes=1))
    assert len(admin.calls) == 1


def test_ensure_topic_raises_any_other_controller_error():
    hosting, _ = _hosting(live_brokers=3, fail=RemoteError(503, 50300, "no controller"))
    with pytest.raises(RemoteError):
        asyncio.run(hosting.ensure_topic(replication_factor=3, min_insync=lambda rf: 2, segment_bytes=1))


def test_relay_raises_a_known_error_code_as_its_class_and_others_as_remote_errors():
    answers = iter([(200, {"ok": 1}), (503, {"error_code": 50301, "message": "loading"}),
                    (500, {"error_code": 50001, "message": "boom"}), (502, "not json")])

    class _Resp:
        def __init__(self, status, doc):
            self.status_code, self._doc, self.text = status, doc, str(doc)

        def json(self):
            if isinstance(self._doc, str):
                raise ValueError(self._doc)
            return self._doc

    async def post_json(leader, path, body, timeout_s):
        return _Resp(*next(answers))

    hosting, _ = _hosting(live_brokers=1)
    hosting.node.peers = SimpleNamespace(post_json=post_json)
    relayed = {50301: NotReadyError}

    async def main():
        assert await hosting.relay(2, "/internal/x/op", {}, timeout_s=1, relayed_by_code=relayed) == {"ok": 1}
        with pytest.raises(NotReadyError, match="loading"):
            await hosting.relay(2, "/internal/x/op", {}, timeout_s=1, relayed_by_code=relayed)
        with pytest.raises(RemoteError) as e:
            await hosting.relay(2, "/internal/x/op", {}, timeout_s=1, relayed_by_code=relayed)
        assert (e.value.status, e.value.error_code) == (500, 50001)
        with pytest.raises(RemoteError) as e:
            await hosting.relay(2, "/internal/x/op", {}, timeout_s=1, relayed_by_code=relayed)
        assert e.value.error_code == 50200

    asyncio.run(main())


def test_retry_until_retries_retriable_errors_only_and_gives_up_at_the_deadline():
    attempts = []

    async def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise NotReadyError("not yet")
        return "done"

    assert asyncio.run(retry_until(time.monotonic() + 10, flaky, (NotReadyError,))) == "done"
    assert len(attempts) == 3

    async def never():
        raise NotReadyError("never")

    with pytest.raises(NotReadyError):
        asyncio.run(retry_until(time.monotonic() + 0.2, never, (NotReadyError,)))

    async def fatal():
        attempts.append(1)
        raise ValueError("not retriable")

    attempts.clear()
    with pytest.raises(ValueError):
        asyncio.run(retry_until(time.monotonic() + 10, fatal, (NotReadyError,)))
    assert len(attempts) == 1
