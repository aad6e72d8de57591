"""The controller quorum hosted for real: three voters in one process, each behind its own uvicorn server.

Every voter has a QuorumHost on real RaftStorage in a tmp directory (fsync on) and a minimal FastAPI app
with the internal router, listening on its own loopback port; messages travel as signed HTTP POSTs. The
timing is shortened (20 ms ticks, 300 ms election timeout) so that each test takes a couple of seconds.
Every server, host and follower started here is stopped in a `finally`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from types import SimpleNamespace

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.security.cluster_auth import ClusterAuth, InternalAuthenticator, now_ms, sign
from lakelog.ingest_api.cluster.errors import NotControllerError, QuorumTimeoutError, QuorumUnavailableError
from lakelog.ingest_api.cluster.metadata_follower import MetadataFollower
from lakelog.ingest_api.cluster.quorum import QuorumHost
from lakelog.ingest_api.cluster.quorum_config import (
    METADATA_DIR_NAME,
    METADATA_PATH,
    RAFT_MESSAGES_PATH,
    QuorumConfig,
    format_voters,
    parse_voters,
)
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.raft.messages import NO_NODE, RequestVote, Role, message_to_dict
from lakelog.ingest_api.raft.state_machine import KeyValueStateMachine
from lakelog.ingest_api.http.routers import internal

pytestmark = pytest.mark.timeout(90)

SECRET = b"integration-test-cluster-secret!"
OBSERVER_ID = 4
WAIT_S = 15.0
FAST = dict(tick_ms=20, election_timeout_ms=300, heartbeat_interval_ms=60, request_timeout_ms=300)
put = KeyValueStateMachine.put


class CountingKV(KeyValueStateMachine):
    """The key-value state machine, counting restores (a snapshot was installed or loaded)."""

    def __init__(self) -> None:
        super().__init__()
        self.restores = 0
        self.applied: list[int] = []

    def apply(self, entry) -> None:
        super().apply(entry)
        self.applied.append(entry.index)

    def restore(self, data: bytes) -> None:
        super().restore(data)
        self.restores += 1


class _Server(uvicorn.Server):
    """uvicorn without signal handlers: several servers share the test's main thread."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def _listen(port: int = 0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted voter takes its port back
    s.bind(("127.0.0.1", port))
    s.listen(64)
    return s


def _app(host: QuorumHost, wiring: str) -> FastAPI:
    app = FastAPI()
    if wiring == "explicit":
        app.state.quorum = host
        app.state.cluster_auth = InternalAuthenticator(SECRET, known_nodes=frozenset([*host.config.voters,
                                                                                     OBSERVER_ID]))
    else:  # as the node's app does: the router finds `node.quorum` and builds the authenticator
        app.state.node = SimpleNamespace(quorum=host)

    @app.exception_handler(LakelogError)
    async def _error(request: Request, exc: LakelogError):
        status, code, message = http_error(exc)  # as the node's app maps errors
        return JSONResponse({"error_code": code, "message": message}, status_code=status)

    app.include_router(internal.router)
    return app


class Voter:
    def __init__(self, node_id: int, sock: socket.socket, data_dir, overrides: dict, wiring: str) -> None:
        self.node_id = node_id
        self.wiring = wiring
        self.port = sock.getsockname()[1]
        self.data_dir = data_dir
        self.overrides = overrides
        self._sock: socket.socket | None = sock
        self.voters: dict[int, tuple[str, int]] = {}
        self.host: QuorumHost | None = None
        self.sm: CountingKV | None = None
        self.roles: list[tuple[Role, int, int]] = []
        self.applied_calls: list[int] = []
        self._server: _Server | None = None
        self._serving: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        return self.host is not None and self.host.running

    async def start(self) -> None:
        self.sm = CountingKV()
        self.roles, self.applied_calls = [], []
        cfg = QuorumConfig(node_id=self.node_id, voters=self.voters, secret=SECRET, data_dir=self.data_dir,
                           **{**FAST, **self.overrides})
        self.host = QuorumHost(cfg, self.sm, on_role_change=lambda *a: self.roles.append(a),
                               on_applied=self.applied_calls.append)
        await self.host.start()
        sock, self._sock = self._sock or _listen(self.port), None
        self._server = _Server(uvicorn.Config(_app(self.host, self.wiring), log_level="warning", lifespan="off",
                                              access_log=False, timeout_graceful_shutdown=1))
        self._serving = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._serving.done():
                self._serving.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        try:
            if self._serving is not None:
                self._server.should_exit = True
                await self._serving
        finally:
            self._serving = None
            if self.host is not None:
                await self.host.stop()
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextlib.asynccontextmanager
async def quorum(tmp_path, n: int = 3, wiring: str = "explicit", **overrides):
    voters = [Voter(i, _listen(), tmp_path / f"node-{i}", overrides, wiring) for i in range(1, n + 1)]
    addresses = {v.node_id: ("127.0.0.1", v.port) for v in voters}
    for v in voters:
        v.voters = addresses
    try:
        for v in voters:
            await v.start()
        yield voters
    finally:
        for v in voters:
            with contextlib.suppress(Exception):
                await v.stop()


async def _until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def elected(voters: list[Voter], *, above_term: int = 0) -> Voter:
    """The leader once every running voter agrees on it (in one term above `above_term`)."""
    def agreed():
        running = [v for v in voters if v.running]
        leaders = [v for v in running if v.host.is_leader and v.host.term > above_term]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        if all(v.host.leader_id == leader.node_id and v.host.term == leader.host.term for v in running):
            return leader
        return None
    return await _until(agreed, "an agreed leader")


async def converged(voters: list[Voter], expected: dict[str, str]) -> None:
    await _until(lambda: all(v.sm.data == expected for v in voters if v.running),
                 f"every running voter to hold {len(expected)} keys")


# ---------------------------------------------------------------------------------------------
# Configuration (no servers)

def test_parse_voters_reads_the_kraft_format():
    assert parse_voters("1@127.0.0.1:8083, 2@node-b:8084,3@[::1]:8085") == {
        1: ("127.0.0.1", 8083), 2: ("node-b", 8084), 3: ("::1", 8085)}
    assert format_voters({3: ("::1", 8085), 1: ("a", 1)}) == "1@a:1,3@[::1]:8085"
    for bad in ("", "1@h", "x@h:1", "1@h:0", "1@h:70000", "1@h:1,1@g:2", "1:h@2"):
        with pytest.raises(ConfigError):
            parse_voters(bad)


def test_config_is_validated(tmp_path):
    voters = parse_voters("1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003")
    cfg = QuorumConfig(node_id=2, voters=voters, secret=SECRET, data_dir=tmp_path)
    assert cfg.directory == tmp_path / METADATA_DIR_NAME
    assert (cfg.election_timeout_ticks, cfg.heartbeat_interval_ticks, cfg.peers) == (20, 2, (1, 3))
    assert QuorumConfig(node_id=1, voters=voters, secret=SECRET, data_dir=tmp_path,
                        metadata_log_dir=tmp_path / "meta").directory == tmp_path / "meta" / METADATA_DIR_NAME
    for bad in (dict(node_id=4), dict(secret=b"short"), dict(max_message_bytes=1 << 20),
                dict(heartbeat_interval_ms=1000), dict(tick_ms=0)):
        with pytest.raises(ConfigError):
            QuorumConfig(**{**dict(node_id=1, voters=voters, secret=SECRET, data_dir=tmp_path), **bad})


# ---------------------------------------------------------------------------------------------
# A live quorum

def test_leader_elected_proposals_converge_and_followers_redirect(tmp_path):
    async def run():
        async with quorum(tmp_path) as voters:
            leader = await elected(voters)
            term = leader.host.term
            assert term >= 1 and (Role.LEADER, term, leader.node_id) in leader.roles
            expected = {}
            for i in range(15):
                index = await leader.host.propose(put(f"k{i}", f"v{i}"), timeout_s=5)
                # Applied locally when propose returns: the caller reads its effect at once.
                assert leader.sm.data[f"k{i}"] == f"v{i}" and leader.host.applied_index >= index
                expected[f"k{i}"] = f"v{i}"
            # Concurrent proposals each get their own index.
            indexes = await asyncio.gather(*(leader.host.propose(put(f"c{i}", "x")) for i in range(10)))
            assert len(set(indexes)) == 10
            expected.update({f"c{i}": "x" for i in range(10)})
            await converged(voters, expected)
            for v in voters:
                assert v.sm.applied == list(range(1, v.host.applied_index + 1))  # each once, in order
                assert v.applied_calls == sorted(v.applied_calls) and v.applied_calls[-1] == v.host.applied_index
                assert v.host.commit_index >= v.host.applied_index
            follower = next(v for v in voters if v is not leader)
            with pytest.raises(NotControllerError) as refused:
                await follower.host.propose(put("nope", "x"))
            assert (refused.value.leader_id, refused.value.term) == (leader.node_id, term)
            assert follower.roles[-1] == (Role.FOLLOWER, term, leader.node_id)
            assert "nope" not in leader.sm.data
    asyncio.run(run())


def test_a_single_voter_quorum_elects_itself_and_resumes_after_a_restart(tmp_path):
    async def run():
        async with quorum(tmp_path, n=1, wiring="node", snapshot_interval_entries=4) as (solo,):
            await elected([solo])
            for i in range(6):
                await solo.host.propose(put(f"k{i}", str(i)))
            # Wired through app.state.node: the secret from the host's config guards the endpoints.
            async with httpx.AsyncClient(trust_env=False, timeout=5) as c:
                url = solo.url(METADATA_PATH)
                assert (await c.get(url, params={"from_index": 0})).status_code == 401
                r = await c.get(url, params={"from_index": 0}, auth=ClusterAuth(SECRET, 42))
                assert r.status_code == 200 and r.json()["snapshot"]["last_index"] >= 4
            term = solo.host.term
            await solo.stop()
            await solo.start()
            assert solo.sm.restores == 1 and solo.sm.data["k0"] == "0"  # from its snapshot at start
            await elected([solo], above_term=term)
            await _until(lambda: solo.sm.data.get("k5") == "5", "the log after the snapshot to be re-applied")
    asyncio.run(run())


def test_bad_requests_are_refused_and_do_not_touch_the_term(tmp_path):
    async def run():
        async with quorum(tmp_path) as voters:
            leader = await elected(voters)
            term = leader.host.term
            follower = next(v for v in voters if v is not leader)
            other = next(v for v in voters if v not in (leader, follower))
            # A vote request from "other" for a far higher term: it would depose the leader if accepted.
            body = json.dumps(message_to_dict(RequestVote(term + 100, other.node_id, 10**6, term + 50))).encode()
            url = follower.url(RAFT_MESSAGES_PATH)
            headers = {"Content-Type": "application/json"}

            async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
                async def post(signer_secret: bytes, node_id: int, *, stamp: int | None = None, data=body):
                    signed = sign(signer_secret, "POST", RAFT_MESSAGES_PATH, data, node_id,
                                  now_ms() if stamp is None else stamp)
                    return await client.post(url, content=data, headers={**headers, **signed})

                refused = [
                    await client.post(url, content=body, headers=headers),  # unsigned
                    await post(b"the-wrong-cluster-secret-entirely", other.node_id),
                    await post(SECRET, other.node_id, stamp=now_ms() - 60_000),  # stale
                    await post(SECRET, 99),  # not a node of this cluster
                ]
                for r in refused:
                    assert r.status_code == 401, r.text
                    assert r.json()["error_code"] == 40101
                # Signed properly, but by a node that is not a voter, or in another voter's name.
                assert (await post(SECRET, OBSERVER_ID)).status_code == 403
                assert (await post(SECRET, leader.node_id)).status_code == 403
                # Signed properly, but not a Raft message.
                r = await post(SECRET, other.node_id, data=b'{"type": "Nonsense"}')
                assert r.status_code == 422 and r.json()["error_code"] == 42201
                # The body was altered after signing.
                signed = sign(SECRET, "POST", RAFT_MESSAGES_PATH, body, other.node_id, now_ms())
                r = await client.post(url, content=body.replace(b'"term"', b'"term" '), headers={**headers, **signed})
                assert r.status_code == 401
                # Too large for max_message_bytes: refused before it is read.
                big = b" " * (follower.host.config.max_message_bytes + 1)
                assert (await post(SECRET, other.node_id, data=big)).status_code == 413
                # Reads are authenticated too.
                r = await client.get(follower.url(METADATA_PATH), params={"from_index": 0})
                assert r.status_code == 401
            await asyncio.sleep(0.3)  # a few heartbeats
            assert all(v.host.term == term for v in voters)
            assert leader.host.is_leader and follower.host.leader_id == leader.node_id
    asyncio.run(run())


def test_leader_failover_keeps_committed_data_and_a_restarted_voter_catches_up(tmp_path):
    async def run():
        async with quorum(tmp_path) as voters:
            old = await elected(voters)
            old_term = old.host.term
            expected = {}
            for i in range(10):
                await old.host.propose(put(f"a{i}", str(i)))
                expected[f"a{i}"] = str(i)
            await old.stop()
            new = await elected(voters, above_term=old_term)
            assert new is not old and new.host.term > old_term
            assert new.sm.data == expected  # committed before the crash, still there
            for i in range(5):
                await new.host.propose(put(f"b{i}", str(i)))
                expected[f"b{i}"] = str(i)
            await converged(voters, expected)
            # The old leader restarts from its files and follows the new leader.
            await old.start()
            assert old.host.term >= old_term  # the durable term came back
            await converged(voters, expected)
            assert old.host.leader_id == new.node_id and not old.host.is_leader
            assert old.host.term == new.host.term
            # Without a quorum a proposal cannot commit: it times out or the leader steps down.
            survivors = [v for v in voters if v is not new]
            await survivors[0].stop()
            await survivors[1].stop()
            with pytest.raises((QuorumTimeoutError, NotControllerError)):
                await new.host.propose(put("lost", "x"), timeout_s=0.5)
            await _until(lambda: not new.host.is_leader, "check quorum to depose the isolated leader")
    asyncio.run(run())


def test_a_voter_whose_disk_fails_stops_and_the_others_carry_on(tmp_path):
    async def run():
        async with quorum(tmp_path) as voters:
            broken = await elected(voters)
            await broken.host.propose(put("before", "1"))
            term = broken.host.term

            def failing_persist(effects):
                raise OSError(5, "Input/output error")

            broken.host._storage.persist_many = failing_persist  # the next fsync fails
            with pytest.raises(QuorumUnavailableError):
                await broken.host.propose(put("during", "1"))
            assert isinstance(broken.host.failure, OSError) and not broken.host.running
            assert not broken.host.is_leader and broken.roles[-1] == (Role.FOLLOWER, term, NO_NODE)
            with pytest.raises(QuorumUnavailableError):
                await broken.host.propose(put("after", "1"))
            new = await elected(voters, above_term=term)
            assert new is not broken
            # Committed before the failure: the new leader applies it once its own first entry commits.
            await _until(lambda: new.sm.data.get("before") == "1", "the new leader to apply the committed entry")
            await new.host.propose(put("after", "2"))
            # It comes back from its files once "repaired" (restarted), as after a crash.
            await broken.stop()
            await broken.start()
            await _until(lambda: broken.sm.data.get("after") == "2", "the repaired voter to catch up")
    asyncio.run(run())


def test_a_restarted_voter_catches_up_by_snapshot_and_restarts_from_its_own(tmp_path):
    async def run():
        async with quorum(tmp_path, snapshot_interval_entries=5) as voters:
            leader = await elected(voters)
            lagging = next(v for v in voters if v is not leader)
            await lagging.stop()
            assert lagging.host.snapshot_index == 0  # it stops before its first snapshot
            expected = {}
            for i in range(23):
                await leader.host.propose(put(f"k{i % 7}", str(i)))
                expected[f"k{i % 7}"] = str(i)
            assert leader.host.snapshot_index >= 20
            snapshots = list((leader.data_dir / METADATA_DIR_NAME).glob("snapshot-*.json"))
            assert len(snapshots) == 1  # older ones are deleted
            # Its log is compacted past the lagging voter's position, so it gets InstallSnapshot.
            await lagging.start()
            await converged(voters, expected)
            assert lagging.sm.restores == 1 and lagging.host.snapshot_index >= 5
            # Restart again: the state machine comes back from the voter's own snapshot before any event.
            snap_index = lagging.host.snapshot_index
            await lagging.stop()
            await lagging.start()
            assert lagging.sm.restores == 1 and lagging.host.applied_index >= snap_index
            assert lagging.sm.data  # restored at start, before hearing from the leader
            index = await leader.host.propose(put("after", "restart"))
            expected["after"] = "restart"
            await converged(voters, expected)
            assert lagging.host.applied_index >= index
    asyncio.run(run())


def test_observer_follows_the_metadata_log(tmp_path):
    async def run():
        async with quorum(tmp_path, snapshot_interval_entries=5) as voters:
            leader = await elected(voters)
            expected = {}
            for i in range(12):
                await leader.host.propose(put(f"k{i}", str(i)))
                expected[f"k{i}"] = str(i)
            # A voter's answer, bounded: the snapshot first when from_index is below the log start.
            batch = leader.host.read_metadata(0, max_entries=2)
            assert batch.snapshot is not None and batch.snapshot.last_index >= 10
            assert [e.index for e in batch.entries] == list(range(batch.snapshot.last_index + 1,
                                                                  batch.snapshot.last_index + 1 + len(batch.entries)))
            assert len(batch.entries) <= 2
            assert leader.host.read_metadata(leader.host.applied_index).entries == ()

            sm = CountingKV()
            seen: list[int] = []
            follower = MetadataFollower(OBSERVER_ID, voters[0].voters, SECRET, sm, poll_interval_ms=20,
                                        max_wait_ms=200, max_entries=3, on_applied=seen.append)
            try:
                await follower.start()
                await follower.wait_for_applied(leader.host.applied_index, WAIT_S)
                assert sm.data == expected and sm.restores == 1  # caught up from the snapshot
                for i in range(6):
                    await leader.host.propose(put(f"late{i}", str(i)))
                    expected[f"late{i}"] = str(i)
                await follower.wait_for_applied(leader.host.applied_index, WAIT_S)
                assert sm.data == expected and seen == sorted(seen)
                assert follower.leader_id == leader.node_id and follower.term == leader.host.term
            finally:
                await follower.stop()

            # An observer signs its fetches: one with another secret is refused.
            intruder = MetadataFollower(OBSERVER_ID, {leader.node_id: ("127.0.0.1", leader.port)},
                                        b"not-the-cluster-secret-at-all!!", KeyValueStateMachine())
            try:
                with pytest.raises(Exception, match="401"):
                    await intruder.poll_once()
                assert intruder.applied_index == 0
            finally:
                await intruder.stop()
    asyncio.run(run())


def test_metadata_fetch_long_polls_until_an_entry_is_applied(tmp_path):
    async def run():
        # A long-poll far longer than the client waits: only the append can answer it in time.
        async with quorum(tmp_path, metadata_fetch_max_wait_ms=60_000) as voters:
            leader = await elected(voters)
            await leader.host.propose(put("a", "1"))
            follower = next(v for v in voters if v is not leader)
            await _until(lambda: follower.host.applied_index == leader.host.applied_index, "follower to apply")
            at = follower.host.applied_index
            async with httpx.AsyncClient(auth=ClusterAuth(SECRET, OBSERVER_ID), trust_env=False, timeout=30) as c:
                poll = asyncio.create_task(c.get(follower.url(METADATA_PATH),
                                                  params={"from_index": at, "max_wait_ms": 60_000}))
                await asyncio.sleep(0.1)  # usually parked by now; if not, it is served at once (no flake)
                assert not poll.done()  # nothing to answer with before the append: still waiting
                await leader.host.propose(put("b", "2"))
                r = await poll
                assert r.status_code == 200
                doc = r.json()
                assert doc["version"] == 1 and doc["snapshot"] is None and doc["node_id"] == follower.node_id
                assert [e["index"] for e in doc["entries"]] == [at + 1]
                assert doc["leader_id"] == leader.node_id and doc["applied_index"] == at + 1
                r = await c.get(follower.url(METADATA_PATH), params={"from_index": -1})
                assert r.status_code == 422
    asyncio.run(run())


# ---------------------------------------------------------------------------------------------
# Group commit

@pytest.mark.parametrize("append_max_entries", [1, 512])
def test_concurrent_proposals_commit_in_order_with_fewer_fsyncs_when_grouped(tmp_path, append_max_entries):
    """200 proposals queued at once: each applied once, in order, on every voter. Grouped, the
    leader writes them with far fewer fsyncs than entries (proposals queued behind a write share
    the next one) and followers write far fewer than they receive; one at a time (1), one per entry."""
    async def run():
        async with quorum(tmp_path, append_max_entries=append_max_entries) as voters:
            leader = await elected(voters)
            before = {v.node_id: (v.host.counters.persist_groups, v.host.counters.entries_persisted,
                                  v.host._storage.log_syncs) for v in voters}
            payloads = [put(f"k{i:03d}", str(i)) for i in range(200)]
            last = await leader.host.propose_many(payloads, timeout_s=30)
            expected = {f"k{i:03d}": str(i) for i in range(200)}
            await converged(voters, expected)
            assert leader.sm.applied[-200:] == list(range(last - 199, last + 1))
            for v in voters:
                groups0, entries0, syncs0 = before[v.node_id]
                groups = v.host.counters.persist_groups - groups0
                entries = v.host.counters.entries_persisted - entries0
                syncs = v.host._storage.log_syncs - syncs0
                assert entries >= 200, (v.node_id, entries)
                assert syncs <= groups  # at most one fsync of raft.log per group
                if append_max_entries == 1:
                    if v is leader:
                        assert syncs >= 200  # one entry per append
                else:
                    assert syncs <= entries // 4, (v.node_id, syncs, entries)
    asyncio.run(run())


def test_a_group_with_a_refused_proposal_fails_only_that_proposal(tmp_path):
    """Proposals queued together on a follower are each refused (NotControllerError), none lost or hung."""
    async def run():
        async with quorum(tmp_path) as voters:
            leader = await elected(voters)
            follower = next(v for v in voters if v is not leader)
            # The follower's propose() refuses at once; go around it to queue proposals into its driver.
            loop = asyncio.get_running_loop()
            from lakelog.ingest_api.cluster.quorum_driver import Proposal
            futures = [loop.create_future() for _ in range(5)]
            for i, f in enumerate(futures):
                follower.host._enqueue(Proposal(put(f"x{i}", "1"), f))
            done, _ = await asyncio.wait(futures, timeout=WAIT_S)
            assert len(done) == 5
            for f in futures:
                assert isinstance(f.exception(), NotControllerError)
                assert f.exception().leader_id == leader.node_id
    asyncio.run(run())
