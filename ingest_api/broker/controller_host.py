"""Controller hosting: the active controller on the node that is the Raft leader, and controller calls.

Every node hosts a voter of the controller quorum (`cluster/quorum.py`). On the Raft leader this
component runs the active controller (`cluster/controller.py`): it activates it once the leader's
first entry of its term is applied, ticks it every `controller.tick.ms`, and executes controller
requests. A request is an op name and JSON arguments; `OPS` is the table of ops: each entry turns
the arguments into a call of the pure controller (records to propose, result fields), and may
check the outcome once the records are applied. The records are proposed in order and the answer
carries `metadata_offset`, the index of the last one.

`call(op, args)` runs a request wherever the active controller is: here, or forwarded (signed) to
the Raft leader; it retries while the controller moves, up to `CONTROLLER_RETRIES` attempts.

Concurrency: everything runs on the node's event loop; one asyncio lock serialises the
controller's ticks and requests (the controller is not thread-safe and proposals go in order).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.infra import error_codes
from lakelog.infra.logs import NOTICE
from lakelog.ingest_api.cluster.broker_configs import CONTROLLER_OPS as BROKER_CONFIG_CONTROLLER_OPS
from lakelog.ingest_api.cluster.broker_configs import controller_records as broker_config_controller_records
from lakelog.ingest_api.cluster.controller import Controller
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.errors import NotControllerError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.partition_change import batch_changes
from lakelog.ingest_api.cluster.image_values import encode_record
from lakelog.ingest_api.cluster.quorum import QuorumHost
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeError,
    RemoteError,
    TopicExistsError,
)
from lakelog.ingest_api.replication.partition import monotonic_ms
from lakelog.ingest_api.replication.peers import PeerClient
from lakelog.ingest_api.security.records import CONTROLLER_OPS as SECURITY_CONTROLLER_OPS
from lakelog.ingest_api.security.records import controller_records as security_controller_records
from lakelog.ingest_api.schemas.state import CONTROLLER_OPS as SCHEMA_CONTROLLER_OPS
from lakelog.ingest_api.schemas.state_writes import controller_records as schema_controller_records

#: The code another node answers when it is not the active controller (the one error table's row).
_NOT_CONTROLLER_CODE = error_codes.code(NotControllerError.__name__).error_code

log = logging.getLogger("lakelog.node")

#: Most attempts of a controller request while the controller moves.
CONTROLLER_RETRIES = 50

Records = list[dict[str, Any]]


#: Most ISR changes one `alter_partitions` request carries.
MAX_ALTER_PARTITIONS = 2000


@dataclass(frozen=True)
class ControllerOp:
    """One controller request: `run(controller, image, args, now_ms) -> (records, result fields)`;
    `check(image, args, result)` runs once the records are applied (raises when they did not take effect)."""

    run: Callable[[Controller, ClusterImage, dict[str, Any], int], tuple[Records, dict[str, Any]]]
    check: Callable[[ClusterImage, dict[str, Any], dict[str, Any]], None] | None = None


def _register_broker(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
    records, epoch = ctrl.register_broker(int(args["node_id"]), str(args["incarnation_id"]), str(args["host"]),
                                          int(args["port"]), args.get("rack"), now, args.get("kafka_listeners"))
    return records, {"broker_epoch": epoch}


def _heartbeat(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
    records, reply = ctrl.heartbeat(int(args["node_id"]), int(args["broker_epoch"]), now,
                                    caught_up_offset=int(args["caught_up_offset"]),
                                    want_shutdown=bool(args.get("want_shutdown")),
                                    want_fence=bool(args.get("want_fence")))
    return records, {"fenced": reply.fenced, "in_controlled_shutdown": reply.in_controlled_shutdown,
                     "should_shut_down": reply.should_shut_down}


def _create_topic(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
    topic_id = uuid.uuid4().hex
    records = ctrl.create_topic(str(args["name"]), int(args["partitions"]), int(args["replication_factor"]),
                                dict(args.get("configs") or {}), topic_id, now)
    return records, {"topic_id": topic_id}


def _check_topic_created(image: ClusterImage, args: dict[str, Any], result: dict[str, Any]) -> None:
    created = image.topics.get(str(args["name"]))
    if created is None or created.topic_id != result["topic_id"]:
        raise TopicExistsError(f"Topic '{args['name']}' already exists.")


def _alter_partition(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
    records, _ = ctrl.alter_partition(int(args["node_id"]), int(args["broker_epoch"]), str(args["topic"]),
                                      int(args["partition"]), int(args["leader_epoch"]),
                                      int(args["partition_epoch"]), [int(r) for r in args["new_isr"]])
    return records, {}


def _alter_partitions(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
    entries = args["partitions"]
    if not isinstance(entries, list) or len(entries) > MAX_ALTER_PARTITIONS:
        raise InvalidRequestError(f"alter_partitions carries a list of at most {MAX_ALTER_PARTITIONS} partitions")
    records, outcomes = ctrl.alter_partitions(int(args["node_id"]), int(args["broker_epoch"]), entries)
    return records, {"errors": outcomes}


def _allocate_producer_ids(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
    records, first, count = ctrl.allocate_producer_ids(int(args["node_id"]), int(args["broker_epoch"]))
    return records, {"first_id": first, "count": count}


def _security_op(op: str) -> ControllerOp:
    def run(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
        ctrl._require_active()
        return security_controller_records(op, args, image.security)
    return ControllerOp(run)


def _schema_op(op: str) -> ControllerOp:
    def run(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
        ctrl._require_active()
        return schema_controller_records(op, args, image.schemas)
    return ControllerOp(run)


def _broker_config_op(op: str) -> ControllerOp:
    def run(ctrl: Controller, image: ClusterImage, args: dict[str, Any], now: int):
        ctrl._require_active()
        return broker_config_controller_records(op, args, image.broker_configs)
    return ControllerOp(run)


#: Every controller request, by op name (the path of `POST /internal/controller/{op}`).
OPS: dict[str, ControllerOp] = {
    "register_broker": ControllerOp(_register_broker),
    "heartbeat": ControllerOp(_heartbeat),
    "create_topic": ControllerOp(_create_topic, _check_topic_created),
    "delete_topic": ControllerOp(lambda c, i, a, n: (c.delete_topic(str(a["name"])), {})),
    "alter_configs": ControllerOp(lambda c, i, a, n: (c.alter_configs(str(a["name"]), dict(a["configs"])), {})),
    "create_partitions": ControllerOp(lambda c, i, a, n: (c.create_partitions(str(a["name"]), int(a["total"])), {})),
    "alter_partition": ControllerOp(_alter_partition),
    "alter_partitions": ControllerOp(_alter_partitions),
    "allocate_producer_ids": ControllerOp(_allocate_producer_ids),
    # partition reassignment and node removal (ingest_api/cluster/reassignment.py)
    "alter_partition_reassignments": ControllerOp(lambda c, i, a, n: (c.alter_partition_reassignments(
        (str(r["topic"]), r["partition"], r.get("replicas")) for r in a["reassignments"]), {})),
    "unregister_broker": ControllerOp(lambda c, i, a, n: (c.unregister_broker(int(a["node_id"])), {})),
    "elect_leaders": ControllerOp(lambda c, i, a, n: (c.elect_leaders(
        ((str(r["topic"]), r["partition"]) for r in a["partitions"]), unclean=bool(a.get("unclean", False))), {})),
    # users, API keys, ACLs, quotas (ingest_api/security/records.py)
    **{op: _security_op(op) for op in SECURITY_CONTROLLER_OPS},
    # the Schema Registry: subjects, versions, config, mode (ingest_api/schemas/state.py)
    **{op: _schema_op(op) for op in SCHEMA_CONTROLLER_OPS},
    # dynamic broker configs, the replication throttle rates among them (ingest_api/cluster/broker_configs.py)
    **{op: _broker_config_op(op) for op in BROKER_CONFIG_CONTROLLER_OPS},
}


class ControllerHost:
    """The active controller while this node is the Raft leader, and controller calls from this node."""

    def __init__(self, node_id: int, image: ClusterImage, config: ControllerConfig, *, tick_ms: int,
                 request_timeout_ms: int) -> None:
        self.node_id = node_id
        self.image = image
        self.config = config
        self.tick_ms = tick_ms
        self.request_timeout_ms = request_timeout_ms
        self.quorum: QuorumHost | None = None
        self.peers: PeerClient | None = None
        #: The active controller (None unless this node is the Raft leader and has activated it).
        self.controller: Controller | None = None
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task | None = None

    def attach(self, quorum: QuorumHost, peers: PeerClient) -> None:
        """Called on the event loop once the quorum host and the peer client exist."""
        self.quorum, self.peers = quorum, peers
        self._lock = asyncio.Lock()

    @property
    def is_active(self) -> bool:
        return self.quorum is not None and self.quorum.is_leader and self.controller is not None

    @property
    def controller_id(self) -> int:
        """The active controller's node id (-1 while none is known)."""
        leader = self.quorum.leader_id if self.quorum is not None else None
        return -1 if leader is None else leader

    # ------------------------------------------------------------------ hosting

    def on_role_change(self, role: Any, term: int, leader_id: int) -> None:
        """The quorum host's callback: start the controller on becoming Raft leader, stop it on losing that."""
        is_leader = self.quorum is not None and self.quorum.is_leader
        if is_leader and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(term), name="controller")
        elif not is_leader and self._task is not None:
            if self.controller is not None:
                self.controller.deactivate()
            self.controller = None
            self._task.cancel()
            self._task = None
            log.info("node %s is no longer the controller (epoch %d, leader %s)", self.node_id, term, leader_id,
                     extra=NOTICE)

    async def stop(self) -> None:
        await cancel_task(self._task)

    async def _run(self, term: int) -> None:
        # Act only once this term's first entry is applied: then every broker epoch and producer-id
        # block handed out by earlier controllers is in the image.
        while self.image.last_applied_term < term:
            await asyncio.sleep(0.01)
        assert self._lock is not None
        async with self._lock:
            self.controller = Controller(self.image, self.config)
            self.controller.activate(monotonic_ms())
        log.info("node %s is the active controller (epoch %d)", self.node_id, term, extra=NOTICE)
        while True:
            await asyncio.sleep(self.tick_ms / 1000)
            try:
                async with self._lock:
                    ctrl = self.controller
                    if ctrl is None:
                        return
                    await self._propose_all(ctrl.tick(monotonic_ms()))
            except asyncio.CancelledError:
                raise
            except NotControllerError:
                return
            except Exception:
                log.exception("controller tick failed")

    async def _propose_all(self, records: Records) -> int:
        assert self.quorum is not None
        # Together (QuorumHost.propose_many): one round of replication commits them, not one per record;
        # the partition changes of one round packed into few entries (`batch_changes`).
        index = await self.quorum.propose_many([encode_record(r) for r in batch_changes(records)],
                                               self.request_timeout_ms / 1000)
        return max(index, self.image.last_applied_index)

    async def run_op(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Execute a controller request; only on the active controller (else NotControllerError)."""
        entry = OPS.get(op)
        if self._lock is None:
            raise NotControllerError(f"node {self.node_id} is not the active controller", None)
        async with self._lock:
            # The lease: a quorum confirmed this leadership lately and no pause came since (raft/lease.py).
            confirmed = self.quorum is not None and await self.quorum.confirm_lease()
            ctrl = self.controller
            if ctrl is None or not confirmed:
                raise NotControllerError(f"node {self.node_id} is not the active controller",
                                         self.quorum.leader_id if self.quorum else None)
            if entry is None:
                raise InvalidRequestError(f"unknown controller request {op!r}")
            records, fields = entry.run(ctrl, self.image, args, monotonic_ms())
            result = dict(fields)
            result["metadata_offset"] = await self._propose_all(records)
            if entry.check is not None:
                entry.check(self.image, args, result)
            return result

    # ------------------------------------------------------------------ calls from this node

    async def call(self, op: str, args: dict[str, Any], *, attempt_timeout_s: float | None = None) -> dict[str, Any]:
        """Run a controller request on the active controller (here, or forwarded to it); retries while it moves.

        `attempt_timeout_s` bounds each forwarded attempt (heartbeats: well below the broker
        session, so that a call stuck on a controller that died or was cut off is retried on its
        successor before this node's session runs out there).
        """
        delay = 0.05
        last: Exception | None = None
        for _ in range(CONTROLLER_RETRIES):
            if self.is_active:
                try:
                    return await self.run_op(op, args)
                except NotControllerError as e:
                    last = e
            else:
                leader = self.quorum.leader_id if self.quorum is not None else -1
                if leader is not None and leader >= 0 and leader != self.node_id:
                    try:
                        return await self._forward(leader, op, args, attempt_timeout_s)
                    except (NodeError, RemoteError) as e:
                        if isinstance(e, RemoteError) and e.error_code != _NOT_CONTROLLER_CODE:
                            raise  # anything else is final
                        last = e
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        raise LeaderNotAvailableError(f"no active controller answered {op}: {last}")

    async def _forward(self, leader: int, op: str, args: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        assert self.peers is not None
        resp = await self.peers.post_json(leader, f"/internal/controller/{op}", args, timeout_s=timeout_s)
        doc = resp.json() if resp.content else {}
        if resp.status_code == 200:
            return doc
        if doc.get("error_code") != _NOT_CONTROLLER_CODE:
            raise RemoteError(resp.status_code, int(doc.get("error_code", resp.status_code * 100)),
                              str(doc.get("message", resp.text[:200])))
        raise RemoteError(resp.status_code, _NOT_CONTROLLER_CODE, str(doc.get("message")))
