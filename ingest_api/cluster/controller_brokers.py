"""The active controller's brokers: registration, heartbeats, sessions and fencing, ticks, producer ids.

`ControllerBrokers` is the part of `Controller` (controller.py) that deals with brokers:
`register_broker` (a broker epoch above every earlier one, see controller.py's docstring),
`unregister_broker`, `heartbeat` (renews the session, unfences a caught-up broker, runs a
controlled shutdown; answers a `HeartbeatReply`), `tick` (fences expired sessions, moves
leaderships, paces the preferred-leader rebalance), `elect_preferred_leaders` and
`allocate_producer_ids`.

Pure, and not thread-safe: calls come from one thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.controller_state import ControllerState
from lakelog.ingest_api.cluster.errors import BrokerNotRegisteredError
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
from lakelog.ingest_api.cluster.partition_change import LivenessView, change_record, target_state
from lakelog.ingest_api.errors import InvalidRequestError, TopicNotFoundError


@dataclass(frozen=True)
class HeartbeatReply:
    """What a heartbeat tells the broker (valid once the heartbeat's records are applied)."""

    fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class ControllerBrokers(ControllerState):
    """Brokers and producer ids of `Controller` (module doc); its fields are made in controller.py."""

    # --- brokers -------------------------------------------------------------------------------

    def register_broker(self, node_id: int, incarnation_id: str, host: str, port: int, rack: str | None,
                        now_ms: int, kafka_listeners: Any = None) -> tuple[list[dict[str, Any]], int]:
        """Register (or re-register) a node; returns the records and its new broker epoch.

        `kafka_listeners` ([name, host, port], ...) are where its Kafka door is reached.
        The same incarnation, host, port, rack and listeners as the current registration is a retry: no
        records, the current epoch. A new incarnation replaces the registration (the node
        restarted): the new one starts fenced, and the old incarnation's leaderships and ISR places
        are dropped in the same records, as if its session had expired.
        """
        self._require_active()
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
        old = self.image.brokers.get(node_id)
        self._last_contact_ms[node_id] = now_ms
        if old is not None and (old.incarnation_id, old.host, old.port, old.rack, old.kafka_listeners) == (
                incarnation_id, host, port, rack, listeners):
            return [], old.broker_epoch
        epoch = max(self.image.last_applied_index + 1, self._next_broker_epoch,
                    old.broker_epoch + 1 if old is not None else 1)
        self._next_broker_epoch = epoch + 1
        records: list[dict[str, Any]] = [{
            "type": "register_broker", "node_id": node_id, "broker_epoch": epoch,
            "incarnation_id": incarnation_id, "host": host, "port": port, "rack": rack}]
        if listeners:
            records[0]["kafka_listeners"] = [list(x) for x in listeners]
        if old is not None:
            view = LivenessView(self.image)
            view.fence(node_id)
            records += self._reconcile(view, nodes={node_id})
        return self._proposed(records, now_ms), epoch

    def unregister_broker(self, node_id: int) -> list[dict[str, Any]]:
        """Remove a node's registration (operator action); its leaderships and ISR places go too."""
        self._require_active()
        reg = self.image.brokers.get(node_id)
        if reg is None:
            raise BrokerNotRegisteredError(f"node {node_id} is not registered")
        view = LivenessView(self.image)
        view.fence(node_id)
        self._last_contact_ms.pop(node_id, None)
        return self._proposed([_broker_record("unregister_broker", reg)] + self._reconcile(view, nodes={node_id}))

    def heartbeat(self, node_id: int, broker_epoch: int, now_ms: int, *, caught_up_offset: int,
                  want_fence: bool = False, want_shutdown: bool = False
                  ) -> tuple[list[dict[str, Any]], HeartbeatReply]:
        """A broker's heartbeat: renews its session; may unfence it, fence it, or drive its controlled shutdown.

        `caught_up_offset` is the broker's last applied metadata-log index. `want_shutdown` starts
        (and each later heartbeat continues) a controlled shutdown: leaderships move to other ISR
        members, the node leaves the ISRs, and once it leads nothing that could move,
        `should_shut_down` is True and the node is fenced.
        """
        self._require_active()
        reg = self._check_broker(node_id, broker_epoch)
        self._last_contact_ms[node_id] = now_ms
        self._now_ms = max(self._now_ms, now_ms)
        view = LivenessView(self.image)
        if reg.fenced:
            if want_shutdown or reg.in_controlled_shutdown:
                return [], HeartbeatReply(True, reg.in_controlled_shutdown, True)
            if want_fence or caught_up_offset < reg.registration_index:
                return [], HeartbeatReply(True, False, False)
            view.unfence(node_id)
            return (self._proposed([_broker_record("unfence_broker", reg)] + self._reconcile(view, nodes={node_id})),
                    HeartbeatReply(False, False, False))
        if want_shutdown or reg.in_controlled_shutdown:
            records: list[dict[str, Any]] = []
            if not reg.in_controlled_shutdown:
                records.append(_broker_record("broker_controlled_shutdown", reg))
            view.shut_down(node_id)
            moves = self._reconcile_changes(view, nodes={node_id})
            moved_leadership = any(old.leader == node_id and new.leader != node_id for _, _, old, new in moves)
            if reg.in_controlled_shutdown and not moved_leadership:
                # Nothing it leads can move any more: it may go. Fence it now, as Kafka does at
                # SHUTDOWN_NOW, so its ISR places go before its process does.
                view.fence(node_id)
                records.append(_broker_record("fence_broker", reg))
                records += self._reconcile(view, nodes={node_id})
                return self._proposed(records), HeartbeatReply(True, True, True)
            records += [change_record(t, p, old, new) for t, p, old, new in moves]
            return self._proposed(records), HeartbeatReply(False, True, False)
        if want_fence:
            view.fence(node_id)
            return (self._proposed([_broker_record("fence_broker", reg)] + self._reconcile(view, nodes={node_id})),
                    HeartbeatReply(True, False, False))
        return [], HeartbeatReply(False, False, False)

    def tick(self, now_ms: int) -> list[dict[str, Any]]:
        """Fence brokers whose session expired and reconcile partitions (elections, ISR, rebalance).

        Changes this controller proposed and has not seen applied are not proposed again until
        `proposal_timeout_ms` has passed; at most `max_records_per_tick` records, the rest next tick.
        """
        self._require_active()
        self._expire_in_flight(now_ms)
        records: list[dict[str, Any]] = []
        view = LivenessView(self.image)
        fenced_now = False
        for node_id, reg in sorted(self.image.brokers.items()):
            if reg.fenced:
                continue
            last = max(self._last_contact_ms.get(node_id, self._active_since_ms), self._active_since_ms)
            if now_ms - last > self.config.broker_session_timeout_ms:
                view.fence(node_id)  # in flight or not, decide the partitions as if it were fenced
                fenced_now = True
                if self._in_flight.get(("fence", node_id), (None,))[0] != reg.broker_epoch:
                    records.append(_broker_record("fence_broker", reg))
        for node_id in [n for n in self._last_contact_ms if n not in self.image.brokers]:
            del self._last_contact_ms[node_id]  # unregistered: forget the session
        rebalance = (self.config.auto_leader_rebalance_enable
                     and (now_ms - self._last_rebalance_ms >= self.config.leader_imbalance_check_interval_ms
                          or (self._rebalance_due_ms is not None and now_ms >= self._rebalance_due_ms)))
        # A full scan costs O(partitions); skip it while nothing changed.
        if (fenced_now or rebalance or self.image.last_applied_index != self._scanned_index
                or now_ms - self._scanned_ms >= self.config.proposal_timeout_ms):
            if rebalance:
                self._last_rebalance_ms = now_ms
                self._rebalance_due_ms = None
            room = max(0, self.config.max_records_per_tick - len(records))
            changes = [c for c in self._reconcile_changes(view, rebalance=rebalance) if not self._is_in_flight(c)]
            if rebalance:
                changes = self._pace_rebalance(changes, view, now_ms)
            records += [change_record(t, p, old, new) for t, p, old, new in changes[:room]]
            self._scanned_index = self.image.last_applied_index if len(changes) <= room else -1
            self._scanned_ms = now_ms
        return self._proposed(records, now_ms)

    def _pace_rebalance(self, changes: list, view: LivenessView, now_ms: int) -> list:
        """At most `rebalance_moves_per_tick` moves made only to restore preferred leaders; the rest
        on the next ticks. Every leader move is a Raft entry the controller waits for while holding
        its lock, and heartbeats wait on that lock: a few hundred moves at once would make brokers'
        sessions lapse. Changes that are needed anyway (elections, ISR) are never held back."""
        needed, moves = [], []
        for c in changes:
            t, p, old, new = c
            (moves if target_state(old, view, unclean=self._unclean(t), rebalance=False) == old else needed).append(c)
        if len(moves) > self.config.rebalance_moves_per_tick:
            moves = moves[:self.config.rebalance_moves_per_tick]
            self._rebalance_due_ms = now_ms  # the next tick moves the next ones
        return needed + moves

    def elect_preferred_leaders(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Move leadership back to each partition's first replica where it is eligible and in the ISR."""
        self._require_active()
        if topic is not None and topic not in self.image.topics:
            raise TopicNotFoundError(f"Topic '{topic}' not found.")
        return self._proposed(self._reconcile(LivenessView(self.image), rebalance=True, topic=topic))

    # --- producer ids --------------------------------------------------------------------------

    def allocate_producer_ids(self, node_id: int, broker_epoch: int) -> tuple[list[dict[str, Any]], int, int]:
        """A block of producer ids for a broker: (records, first id, count); blocks never overlap."""
        self._require_active()
        reg = self._check_broker(node_id, broker_epoch)
        first = max(self.image.next_producer_id, self._next_producer_id)
        count = self.config.producer_id_block_size
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
