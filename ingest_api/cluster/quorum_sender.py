"""The transport of a controller voter: Raft messages POSTed to the peer voters, fire and forget.

`PeerSender` sends each `Send` effect of the driver (cluster/quorum_driver.py) as JSON
(`message_to_dict`) to `POST /internal/raft/messages` of the peer, signed with the cluster secret
(`cluster_auth.sign`), over `http1.Http1Pool` (keep-alive connections, at most two idle per peer;
answers parsed in C: the leader's heartbeats are most of an idle node's requests). Raft tolerates lost messages, so a send is never retried or awaited by the driver:
a peer with `max_inflight_sends_per_peer` requests in flight, or a body above `max_message_bytes`,
drops the message (counted in `QuorumCounters.sends_dropped`); a failed or refused request is
counted in `send_errors`. `QuorumCounters` are the host's plain counters.

Concurrency: every method runs on the event loop the host was started in.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from dataclasses import dataclass

from lakelog.ingest_api.cluster.http1 import Http1Error, Http1Pool
from lakelog.ingest_api.cluster.quorum_config import RAFT_MESSAGES_PATH, QuorumConfig
from lakelog.ingest_api.security.cluster_auth import check_secret, now_ms, sign
from lakelog.ingest_api.raft.messages import Message, message_to_dict

log = logging.getLogger("lakelog.quorum")


@dataclass
class QuorumCounters:
    """Plain counters of the host (exported by the node's metrics later)."""

    steps: int = 0
    messages_received: int = 0
    messages_sent: int = 0
    sends_dropped: int = 0  # the peer had max_inflight_sends_per_peer in flight, or the body was too large
    send_errors: int = 0  # timeouts, refused connections, non-202 answers
    inbox_full: int = 0
    snapshots: int = 0
    persist_groups: int = 0  # I/O-thread persists, each one fsync of raft.log at most (group commit)
    entries_persisted: int = 0



class PeerSender:
    """Fire-and-forget POSTs to the peer voters, bounded in flight per peer (module doc)."""

    def __init__(self, config: QuorumConfig, counters: QuorumCounters) -> None:
        self.config = config
        self.counters = counters
        self._secret = check_secret(config.secret)
        # At most max_inflight_sends_per_peer connections per peer are in use (send() drops beyond).
        self._pool = Http1Pool(max_idle_per_peer=2, ssl=config.tls)
        self._sends: set[asyncio.Task] = set()
        self._inflight: dict[int, int] = {p: 0 for p in config.peers}
        self._oversize_warned = False

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def send(self, to: int, message: Message) -> None:
        if self._inflight.get(to, 0) >= self.config.max_inflight_sends_per_peer:
            self.counters.sends_dropped += 1
            log.debug("raft voter %d: dropping %s to %d (%d sends in flight)", self.node_id,
                      type(message).__name__, to, self._inflight[to])
            return
        body = json.dumps(message_to_dict(message), separators=(",", ":")).encode()
        if len(body) > self.config.max_message_bytes:
            self.counters.sends_dropped += 1
            if not self._oversize_warned:  # once: it repeats on every heartbeat until fixed
                self._oversize_warned = True
                log.warning("raft voter %d: %s to %d is %d bytes, above max_message_bytes %d; not sent "
                            "(raise max_message_bytes on every voter)", self.node_id, type(message).__name__,
                            to, len(body), self.config.max_message_bytes)
            return
        self._inflight[to] = self._inflight.get(to, 0) + 1
        task = asyncio.get_running_loop().create_task(self._post(to, body))
        self._sends.add(task)
        task.add_done_callback(functools.partial(self._sent, to))

    def _sent(self, to: int, task: asyncio.Task) -> None:
        self._sends.discard(task)
        self._inflight[to] -= 1

    async def _post(self, to: int, body: bytes) -> None:
        host, port = self.config.voters[to]
        headers = {"Content-Type": "application/json",
                   **sign(self._secret, "POST", RAFT_MESSAGES_PATH, body, self.node_id, now_ms())}
        try:
            r = await self._pool.request(host, port, "POST", RAFT_MESSAGES_PATH, body, headers,
                                         timeout_s=self.config.request_timeout_ms / 1000)
        except (Http1Error, OSError) as e:
            self.counters.send_errors += 1
            log.debug("raft voter %d: send to %d failed: %r", self.node_id, to, e)
            return
        if r.status_code != 202:
            self.counters.send_errors += 1
            log.debug("raft voter %d: voter %d answered %d: %s", self.node_id, to, r.status_code, r.text[:200])
        else:
            self.counters.messages_sent += 1

    async def close(self) -> None:
        """Cancel the sends in flight, wait for them, close the connections."""
        for t in list(self._sends):
            t.cancel()
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
        await self._pool.close()
