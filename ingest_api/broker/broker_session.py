"""The broker session: registration with the controller, heartbeats, the serving lease, shutdown.

A node's life as a broker is a state machine (`BrokerState`, transitions checked by
`BrokerSession.transition`; a repeated transition is allowed so retries are safe):

    UNREGISTERED --register--> REGISTERED --fenced / unknown epoch--> UNREGISTERED
    UNREGISTERED | REGISTERED --controlled shutdown or cluster stop--> SHUTTING_DOWN
    any --stop--> STOPPED (the background threads end: `stopped` is set)

Serving lease: a broker serves client requests only while a quorum-committed heartbeat renewed its
session (`session_valid_until`, on this process's monotonic clock, measured from when the heartbeat
was *sent*). Past it the controller may have fenced this node and moved its leaderships without this
node hearing of it (a pause, a network partition). After a lapse, the first renewed heartbeat also
names the metadata index to apply before serving again (`catch_up_index`), so a deposed leader never
answers as a leader. `ready` is all of that: REGISTERED, lease valid, caught up, and the image shows
this broker epoch unfenced.

Concurrency: state changes happen on the node's event loop; `ready` and `stopped` are read from any
thread (plain reads of immutable values and a threading.Event).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from typing import Any, Awaitable, Callable

from lakelog.infra import error_codes
from lakelog.infra.errors import invariant
from lakelog.infra.logs import NOTICE
from lakelog.ingest_api.cluster.errors import BrokerNotRegisteredError, FencedBrokerError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.errors import NodeError, RemoteError
from lakelog.ingest_api.raft.lease import ClockGap

log = logging.getLogger("lakelog.node")

ControllerCall = Callable[..., Awaitable[dict[str, Any]]]


class BrokerState(enum.IntEnum):
    UNREGISTERED = 0  # no broker epoch (starting, or fenced / unknown to the controller)
    REGISTERED = 1  # holds a broker epoch; serves while `ready`
    SHUTTING_DOWN = 2  # controlled shutdown or cluster stop: serves nothing, sends no heartbeats
    STOPPED = 3  # the node is stopping: background threads end


_TRANSITIONS: dict[BrokerState, frozenset[BrokerState]] = {
    BrokerState.UNREGISTERED: frozenset({BrokerState.REGISTERED, BrokerState.SHUTTING_DOWN, BrokerState.STOPPED}),
    BrokerState.REGISTERED: frozenset({BrokerState.UNREGISTERED, BrokerState.SHUTTING_DOWN, BrokerState.STOPPED}),
    BrokerState.SHUTTING_DOWN: frozenset({BrokerState.STOPPED}),
    BrokerState.STOPPED: frozenset(),
}

#: Controller error codes that mean "register again": fenced broker, unknown broker epoch.
_REREGISTER_ERRORS = (FencedBrokerError, BrokerNotRegisteredError)
_REREGISTER_CODES = tuple(error_codes.code(c.__name__).error_code for c in _REREGISTER_ERRORS)


class BrokerSession:
    def __init__(self, config: NodeConfig, image: ClusterImage, incarnation_id: str) -> None:
        self.config = config
        self.node_id = config.node_id
        self.image = image
        self.incarnation_id = incarnation_id
        self.state = BrokerState.UNREGISTERED
        self.broker_epoch = -1
        #: Set on entering STOPPED; background threads wait on it.
        self.stopped = threading.Event()
        self.session_valid_until = 0.0
        #: A pause (a jump of the monotonic clock) voids the session: see observe_pause.
        self._pause = ClockGap(max(1000, config.broker_session_timeout_ms / 2), time.monotonic() * 1000)
        self.catch_up_index = 0
        #: Asked at each heartbeat: True makes the heartbeat ask the controller to fence this node
        #: (its log directory is offline: its leaderships move away and it leaves the ISRs).
        self.fence_requested: Callable[[], bool] = lambda: False

    def transition(self, to: BrokerState) -> None:
        invariant(to == self.state or to in _TRANSITIONS[self.state],
                  f"broker session of node {self.node_id}: illegal transition {self.state.name} -> {to.name}")
        self.state = to
        if to != BrokerState.REGISTERED:
            if to == BrokerState.UNREGISTERED:
                self.broker_epoch = -1
            if to == BrokerState.STOPPED:
                self.stopped.set()

    @property
    def ready(self) -> bool:
        self.observe_pause()
        if self.state != BrokerState.REGISTERED:
            return False
        if time.monotonic() >= self.session_valid_until or self.image.last_applied_index < self.catch_up_index:
            return False
        b = self.image.brokers.get(self.node_id)
        return b is not None and b.broker_epoch == self.broker_epoch and not b.fenced

    def observe_pause(self) -> None:
        """After a pause of half a session (at least 1 s) or more, serve nothing until a heartbeat renewed
        the session and the metadata the controller had then is applied: leaderships may have moved."""
        if self._pause.observe(time.monotonic() * 1000) and self.session_valid_until > 0:
            self.session_valid_until = 0.0
            log.warning("node %s: its clock jumped (a pause); not serving until its session is renewed",
                        self.node_id)

    async def watch_clock(self) -> None:
        """Frequent observations, so that only a real pause looks like a gap."""
        while True:
            self.observe_pause()
            await asyncio.sleep(0.1)

    @property
    def quorum_lost_s(self) -> float:
        """How long a controlled shutdown waits with no known Raft leader: three election timeouts
        (a failover takes one or two), at least 1 s."""
        return max(1.0, 3 * self.config.controller_quorum_election_timeout_ms / 1000)

    @property
    def heartbeat_timeout_s(self) -> float:
        """One heartbeat attempt's time limit: half the broker session."""
        return max(0.05, self.config.broker_session_timeout_ms / 2000)

    def heartbeat_args(self, *, want_shutdown: bool = False) -> dict[str, Any]:
        return {"node_id": self.node_id, "broker_epoch": self.broker_epoch,
                "caught_up_offset": self.image.last_applied_index, "want_shutdown": want_shutdown,
                "want_fence": self.fence_requested()}

    def shut_down(self) -> None:
        """Stop serving (controlled shutdown, cluster stop); a stopped session stays stopped."""
        if self.state != BrokerState.STOPPED:
            self.transition(BrokerState.SHUTTING_DOWN)

    # ------------------------------------------------------------------ the loop

    async def run(self, call: ControllerCall, on_ready: Callable[[], None]) -> None:
        """Register, then heartbeat every `broker.heartbeat.interval.ms` (faster while not ready);
        `on_ready` runs after each round in which the node is ready."""
        cfg = self.config
        while True:
            if self.state == BrokerState.UNREGISTERED:
                if not await self._register(call):
                    await asyncio.sleep(0.05)
                    continue
            if self.state == BrokerState.REGISTERED:
                await self._heartbeat(call)
            if self.ready:
                on_ready()
            interval = cfg.broker_heartbeat_interval_ms if self.ready else min(200, cfg.broker_heartbeat_interval_ms)
            await asyncio.sleep(interval / 1000)

    async def _register(self, call: ControllerCall) -> bool:
        host, port = self.config.advertised_host_port
        try:
            res = await call("register_broker", {
                "node_id": self.node_id, "incarnation_id": self.incarnation_id, "host": host, "port": port,
                "rack": self.config.broker_rack or None,
                "kafka_listeners": [[lst.name, lst.host, lst.port] for lst in self.config.advertised_kafka_listeners]})
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("registration failed, retrying: %s", e)
            return False
        if self.state != BrokerState.UNREGISTERED:  # shut down meanwhile
            return False
        self.transition(BrokerState.REGISTERED)
        self.broker_epoch = int(res["broker_epoch"])
        log.info("node %s registered with broker epoch %d", self.node_id, self.broker_epoch, extra=NOTICE)
        return True

    async def _heartbeat(self, call: ControllerCall) -> None:
        try:
            sent = time.monotonic()
            res = await call("heartbeat", self.heartbeat_args(), attempt_timeout_s=self.heartbeat_timeout_s)
            if not res.get("fenced"):
                if sent >= self.session_valid_until:  # lapsed: catch up before serving again
                    self.catch_up_index = int(res.get("metadata_offset", 0))
                # The controller renews the session when it handles the heartbeat, after `sent`.
                self.session_valid_until = sent + self.config.broker_session_timeout_ms / 1000
        except asyncio.CancelledError:
            raise
        except NodeError as e:
            relayed = isinstance(e, RemoteError) and e.error_code in _REREGISTER_CODES
            if (relayed or isinstance(e, _REREGISTER_ERRORS)) and self.state == BrokerState.REGISTERED:
                self.transition(BrokerState.UNREGISTERED)
            log.info("heartbeat failed: %s", e)
        except Exception as e:
            log.info("heartbeat failed: %s", e)

    async def controlled_shutdown(self, call: ControllerCall,
                                  controller_known: Callable[[], bool] | None = None) -> None:
        """Ask the controller to move this node's leaderships away; returns when it says done or on timeout.

        `controller_known()` (this node's Raft voter knows a leader): when it stays False for
        `quorum_lost_s` the controller quorum is gone (the rest of a local cluster stopped first),
        nobody can move the leaderships, and waiting out the timeout would only delay the stop.
        """
        if self.state != BrokerState.REGISTERED or not self.config.controlled_shutdown_enable:
            return
        self.transition(BrokerState.SHUTTING_DOWN)
        deadline = time.monotonic() + self.config.controlled_shutdown_timeout_ms / 1000
        attempt: asyncio.Future | None = None
        leaderless_since: float | None = None
        try:
            while time.monotonic() < deadline:
                if not [b for b in self.image.serving_brokers() if b != self.node_id]:
                    # The whole cluster is stopping (or the rest is down): no one can take the leaderships.
                    log.info("node %s: no other broker can take its leaderships; stopping", self.node_id)
                    return
                if controller_known is not None and not controller_known():
                    leaderless_since = leaderless_since or time.monotonic()
                    if time.monotonic() - leaderless_since >= self.quorum_lost_s:
                        log.info("node %s: no controller quorum for %.1fs (the other voters stopped); stopping",
                                 self.node_id, time.monotonic() - leaderless_since)
                        return
                else:
                    leaderless_since = None
                if attempt is None:
                    attempt = asyncio.ensure_future(call("heartbeat", self.heartbeat_args(want_shutdown=True),
                                                         attempt_timeout_s=self.heartbeat_timeout_s))
                # Not cancelled for being slow (a controller moving many leaderships takes a while);
                # the image is looked at meanwhile.
                await asyncio.wait({attempt}, timeout=0.1)
                if not attempt.done():
                    continue
                done, attempt = attempt, None
                try:
                    if done.result().get("should_shut_down"):
                        log.info("node %s: controlled shutdown done", self.node_id)
                        return
                except Exception as e:
                    log.info("controlled shutdown request failed: %s", e)
                await asyncio.sleep(0.1)
        finally:
            if attempt is not None:
                attempt.cancel()
        log.warning("node %s: controlled shutdown timed out; stopping anyway", self.node_id)
