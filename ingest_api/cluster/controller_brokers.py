"""The active controller's brokers: registration, heartbeats, sessions and fencing, producer ids.

`BrokerRegistry` is the part of the controller (controller.py) that builds the broker records and
keeps the brokers' sessions: `register_broker` (a broker epoch above every earlier one, see
controller.py's docstring), `unregister_broker`, `heartbeat` (renews the session, unfences a
caught-up broker, runs a controlled shutdown; answers a `HeartbeatReply`), `expire_sessions` (the
fences of `tick`), `check_broker` and `allocate_producer_ids`. What a broker-state change does to
its partitions is `PartitionReconciler`'s (controller_partitions.py): the registry lays the change
over a `LivenessView` and asks it for the partition changes, and hands it every record it proposes.

Its state is soft (the last heartbeat per node, the high-water marks of the broker epochs and
producer ids handed out) and reset on `activate` / `deactivate`. Pure, and not thread-safe: calls
come from one thread (the controller checks it is active first).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.controller_partitions import PartitionReconciler
from lakelog.ingest_api.cluster.errors import BrokerNotRegisteredError, FencedBrokerError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import (
    RecordRejected,
    read_kafka_listeners,
    MAX_HOST_LENGTH,
    MAX_INCARNATION_ID_LENGTH,
    MAX_LONG,
    MAX_NODE_ID,
    MAX_RACK_LENGTH,
    BrokerRegistration,
)
from lakelog.ingest_api.cluster.partition_change import LivenessView
from lakelog.ingest_api.errors import InvalidRequestError

log = logging.getLogger("lakelog.controller")

@dataclass(frozen=True)
class HeartbeatReply:
    """What a heartbeat tells the broker (valid once the heartbeat's records are applied)."""

    fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class BrokerRegistry:
    """Broker records, sessions and producer ids of the active controller (module doc)."""

    def __init__(self, image: ClusterImage, config: ControllerConfig, partitions: PartitionReconciler) -> None:
        self._image = image
        self._config = config
        self._partitions = partitions
        self._active_since_ms = 0
        self._last_contact_ms: dict[int, int] = {}
        #: When `expire_sessions` last ran (0: not yet in this term).
        self._last_check_ms = 0
        self._next_broker_epoch = 1
        self._next_producer_id = 0

    def activate(self, now_ms: int) -> None:
        """A new term of the controller: every registered broker gets a full session from `now_ms`."""
        self._active_since_ms = now_ms
        self._last_contact_ms.clear()
        self._last_check_ms = 0
        self._next_broker_epoch = self._image.last_applied_index + 1
        self._next_producer_id = self._image.next_producer_id

    def deactivate(self) -> None:
        self._last_contact_ms.clear()

    def check_broker(self, node_id: int, broker_epoch: int) -> BrokerRegistration:
        """The registration of `node_id` if `broker_epoch` is its current one (BrokerNotRegisteredError,
        FencedBrokerError otherwise)."""
        reg = self._image.brokers.get(node_id)
        if reg is None:
            raise BrokerNotRegisteredError(f"node {node_id} is not registered")
        if broker_epoch != reg.broker_epoch:
            raise FencedBrokerError(f"broker epoch {broker_epoch} of node {node_id} is stale "
                                    f"(current: {reg.broker_epoch}); register again")
        return reg

    def register_broker(self, node_id: int, incarnation_id: str, host: str, port: int, rack: str | None,
                        now_ms: int, kafka_listeners: Any = None) -> tuple[list[dict[str, Any]], int]:
        """Register (or re-register) a node; returns the records and its new broker epoch.

        `kafka_listeners` ([name, host, port], ...) are where its Kafka door is reached.
        The same incarnation, host, port, rack and listeners as the current registration is a retry: no
        records, the current epoch. A new incarnation replaces the registration (the node
        restarted): the new one starts fenced, and the old incarnation's leaderships and ISR places
        are dropped in the same records, as if its session had expired.
        """
        _check_int("node_id", node_id, 0, MAX_NODE_ID)
        _check_int("port", port, 1, 65535)
        _check_str("incarnation_id", incarnation_id, MAX_INCARNATION_ID_LENGTH)
        _check_str("host", host, MAX_HOST_LENGTH)
        if rack is not None:
            _check_str("rack", rack, MAX_RACK_LENGTH)
        try:
            listeners = read_kafka_listeners({"kafka_listeners": kafka_listeners}, "kafka_listeners")
        except RecordRejected as e:
            raise InvalidRequestError(str(e)) from None
        old = self._image.brokers.get(node_id)
        self._last_contact_ms[node_id] = now_ms
        if old is not None and (old.incarnation_id, old.host, old.port, old.rack, old.kafka_listeners) == (
                incarnation_id, host, port, rack, listeners):
            return [], old.broker_epoch
        epoch = max(self._image.last_applied_index + 1, self._next_broker_epoch,
                    old.broker_epoch + 1 if old is not None else 1)
        self._next_broker_epoch = epoch + 1
        records: list[dict[str, Any]] = [{
            "type": "register_broker", "node_id": node_id, "broker_epoch": epoch,
            "incarnation_id": incarnation_id, "host": host, "port": port, "rack": rack}]
        if listeners:
            records[0]["kafka_listeners"] = [list(x) for x in listeners]
        if old is not None:
            view = LivenessView(self._image)
            view.fence(node_id)
            records += self._partitions.reconcile(view, nodes={node_id})
        return self._partitions.proposed(records, now_ms), epoch

    def unregister_broker(self, node_id: int) -> list[dict[str, Any]]:
        """Remove a node's registration (operator action); its leaderships and ISR places go too."""
        reg = self._image.brokers.get(node_id)
        if reg is None:
            raise BrokerNotRegisteredError(f"node {node_id} is not registered")
        view = LivenessView(self._image)
        view.fence(node_id)
        self._last_contact_ms.pop(node_id, None)
        return self._with_partitions(_broker_record("unregister_broker", reg), view, node_id)

    def heartbeat(self, node_id: int, broker_epoch: int, now_ms: int, *, caught_up_offset: int,
                  want_fence: bool = False, want_shutdown: bool = False
                  ) -> tuple[list[dict[str, Any]], HeartbeatReply]:
        """A broker's heartbeat: renews its session; may unfence it, fence it, or drive its controlled shutdown.

        `caught_up_offset` is the broker's last applied metadata-log index. `want_shutdown` starts
        (and each later heartbeat continues) a controlled shutdown: leaderships move to other ISR
        members, the node leaves the ISRs, and once it leads nothing that could move,
        `should_shut_down` is True and the node is fenced.
        """
        reg = self.check_broker(node_id, broker_epoch)
        self._last_contact_ms[node_id] = now_ms
        self._partitions.observe(now_ms)
        view = LivenessView(self._image)
        if reg.fenced:
            if want_shutdown or reg.in_controlled_shutdown:
                return [], HeartbeatReply(True, reg.in_controlled_shutdown, True)
            if want_fence or caught_up_offset < reg.registration_index:
                return [], HeartbeatReply(True, False, False)
            view.unfence(node_id)
            reply = HeartbeatReply(False, False, False)
            return self._with_partitions(_broker_record("unfence_broker", reg), view, node_id), reply
        if want_shutdown or reg.in_controlled_shutdown:
            records: list[dict[str, Any]] = []
            if not reg.in_controlled_shutdown:
                records.append(_broker_record("broker_controlled_shutdown", reg))
            view.shut_down(node_id)
            moves = self._partitions.changes(view, nodes={node_id})
            moved_leadership = any(old.leader == node_id and new.leader != node_id for _, _, old, new in moves)
            if reg.in_controlled_shutdown and not moved_leadership:
                # Nothing it leads can move any more: it may go. Fence it now, as Kafka does at
                # SHUTDOWN_NOW, so its ISR places go before its process does.
                view.fence(node_id)
                records.append(_broker_record("fence_broker", reg))
                records += self._partitions.reconcile(view, nodes={node_id})
                return self._partitions.proposed(records), HeartbeatReply(True, True, True)
            records += self._partitions.records(moves)
            return self._partitions.proposed(records), HeartbeatReply(False, True, False)
        if want_fence:
            view.fence(node_id)
            reply = HeartbeatReply(True, False, False)
            return self._with_partitions(_broker_record("fence_broker", reg), view, node_id), reply
        return [], HeartbeatReply(False, False, False)

    def expire_sessions(self, view: LivenessView, now_ms: int) -> tuple[list[dict[str, Any]], bool]:
        """The fences of the brokers whose session expired, laid over `view`; (records, whether any expired).

        A fence this controller proposed and has not seen applied is not proposed again, but the
        broker is fenced in `view` all the same, so its partitions are decided as if it were.
        """
        records: list[dict[str, Any]] = []
        expired = False
        gap = now_ms - self._last_check_ms if self._last_check_ms else 0
        self._last_check_ms = now_ms
        if gap > self._config.broker_session_timeout_ms // 2:
            # This controller did not run for a while (its process was paused or its loop stalled):
            # the heartbeats of that time may still wait unread in its sockets, so a silence it
            # measured across the gap says nothing about the brokers. Each gets a full session from
            # now, as in a new term; a broker that is really gone is fenced one session later.
            log.warning("controller: %d ms since its last session check (a pause); every broker's session "
                        "restarts now", gap)
            self._active_since_ms = now_ms
            return records, expired
        for node_id, reg in sorted(self._image.brokers.items()):
            if reg.fenced:
                continue
            last = max(self._last_contact_ms.get(node_id, self._active_since_ms), self._active_since_ms)
            if now_ms - last > self._config.broker_session_timeout_ms:
                view.fence(node_id)
                expired = True
                if not self._partitions.fence_in_flight(reg):
                    records.append(_broker_record("fence_broker", reg))
        for node_id in [n for n in self._last_contact_ms if n not in self._image.brokers]:
            del self._last_contact_ms[node_id]  # unregistered: forget the session
        return records, expired

    def _with_partitions(self, record: dict[str, Any], view: LivenessView, node_id: int) -> list[dict[str, Any]]:
        """`record`, then the changes it makes to the partitions of `node_id` (per `view`), as proposed."""
        return self._partitions.proposed([record] + self._partitions.reconcile(view, nodes={node_id}))

    # --- producer ids --------------------------------------------------------------------------

    def allocate_producer_ids(self, node_id: int, broker_epoch: int) -> tuple[list[dict[str, Any]], int, int]:
        """A block of producer ids for a broker: (records, first id, count); blocks never overlap."""
        reg = self.check_broker(node_id, broker_epoch)
        first = max(self._image.next_producer_id, self._next_producer_id)
        count = self._config.producer_id_block_size
        invariant(first + count <= MAX_LONG, "producer ids are exhausted")
        self._next_producer_id = first + count
        return ([{"type": "allocate_producer_ids", "node_id": node_id, "broker_epoch": reg.broker_epoch,
                  "first_id": first, "count": count}], first, count)


def _broker_record(kind: str, reg: BrokerRegistration) -> dict[str, Any]:
    return {"type": kind, "node_id": reg.node_id, "broker_epoch": reg.broker_epoch}


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidRequestError(f"{name} must be an integer in [{lo}, {hi}], not {value!r}")


def _check_str(name: str, value: Any, max_length: int) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= max_length:
        raise InvalidRequestError(f"{name} must be a string of 1..{max_length} characters")
