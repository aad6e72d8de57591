"""Start and stop real `lakelog node` processes on loopback for integration tests."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

LAKELOG = str(Path(sys.executable).with_name("lakelog"))


def _port_range() -> tuple[int, int]:
    """Ports just below the kernel's ephemeral range: bind(0) and outgoing connections never take them."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(1024, low - 12000), low


#: port -> the fd of its lock file: held while this test process lives, released by the kernel at exit.
_HELD_PORTS: dict[int, int] = {}


def _claim(port: int, lock_dir: Path) -> bool:
    """Lock `port`'s file and check the port is free; the lock is then held until this process exits."""
    if port in _HELD_PORTS:
        return False
    fd = os.open(lock_dir / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:  # in use by something outside this scheme
            os.close(fd)
            return False
    _HELD_PORTS[port] = fd
    return True


def free_ports(count: int) -> list[int]:
    """`count` consecutive loopback ports for nodes to listen on, held for this process's life.

    Binding port 0 and closing the socket would release the port before the node binds it, and any
    process (another test run on the machine, an outgoing connection) could take it meanwhile. So
    ports come from below the ephemeral range, which the kernel never hands out by itself, and each
    is claimed by an exclusive lock on a file named after it (shared by every test process on the
    machine) and checked free by a bind; the locks stay held until this process exits.
    """
    lo, hi = _port_range()
    lock_dir = Path(tempfile.gettempdir()) / "lakelog-test-ports"
    lock_dir.mkdir(exist_ok=True)
    span = hi - lo - count
    start = (os.getpid() * 7919 + len(_HELD_PORTS) * 104729) % span  # spreads processes apart; not random
    for i in range(span):
        first = lo + (start + i) % span
        claimed = []
        for port in range(first, first + count):
            if not _claim(port, lock_dir):
                break
            claimed.append(port)
        if len(claimed) == count:
            return claimed
        for port in claimed:  # a partial run: give those back
            os.close(_HELD_PORTS.pop(port))
    raise RuntimeError(f"no {count} consecutive free ports in {lo}..{hi - 1}")


def free_port() -> int:
    """One loopback port held for this process's life (see `free_ports`)."""
    return free_ports(1)[0]


def free_port_block(count: int, attempts: int = 50) -> int:
    """The first of `count` consecutive loopback ports that were all free just now (`lakelog up`
    takes BASE..BASE+count-1): each is bound, as the launcher's own check binds them."""
    for _ in range(attempts):
        base = free_port()
        if base + count - 1 > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free loopback ports in {attempts} attempts")


@dataclass
class NodeProcess:
    """One node process. `stop()` is SIGTERM (clean), `kill()` is SIGKILL (crash)."""

    data_dir: Path
    port: int
    node_id: int = 1
    overrides: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    #: The CA of the node's certificate: set (with ssl.certfile / ssl.keyfile overrides) for an https node.
    tls_ca: str | None = None
    #: (certificate, key) presented to an https node that requires client certificates.
    tls_client: tuple[str, str] | None = None
    #: The port of the node's Kafka listener (PLAINTEXT on loopback); None: no Kafka listener.
    kafka_port: int | None = None
    #: Environment variables added to the process's (fault hooks, LD_PRELOAD of a fake clock).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        """The node's Kafka listener as a `bootstrap.servers` entry."""
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_ca else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0, *, wait: bool = True) -> "NodeProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"node-{self.node_id}-{self.port}.log"
        args = [LAKELOG, "node", "--set", f"node.id={self.node_id}", "--set", f"log.dirs={self.data_dir}",
                "--set", f"listeners={self.url}" + (f",PLAINTEXT://127.0.0.1:{self.kafka_port}"
                                                   if self.kafka_port is not None else "")]
        for k, v in self.overrides.items():
            args += ["--set", f"{k}={v}"]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **self.env} if self.env else None)
        log.close()
        if wait:
            self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0, verify=self._verify()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"node on port {self.port} not ready after {timeout_s}s:\n{self.read_log()}")

    def _verify(self):
        if not self.tls_ca:
            return True
        import ssl

        ctx = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_client:
            ctx.load_cert_chain(*self.tls_client)
        return ctx

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self, timeout_s: float = 15.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, timeout_s: float = 30.0) -> "NodeProcess":
        self.stop()
        return self.start(timeout_s)

    def pause(self) -> None:
        """SIGSTOP: the process is frozen (a GC pause, a hung disk) but keeps its sockets."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


#: Settings that make failures show quickly in tests (a real cluster uses the defaults).
FAST_CLUSTER = {
    "broker.session.timeout.ms": "1500",
    "broker.heartbeat.interval.ms": "200",
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "controller.quorum.election.timeout.ms": "500",
    "controller.tick.ms": "100",
    "request.timeout.ms": "10000",
    "controlled.shutdown.timeout.ms": "5000",
    "log.cleaner.backoff.ms": "200",
}


@dataclass
class Cluster:
    """N node processes on loopback forming one cluster (every node a controller voter)."""

    root: Path
    size: int = 3
    overrides: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeProcess] = field(default_factory=list)
    #: Give every node a Kafka listener (PLAINTEXT, its own free port).
    kafka: bool = False

    def __post_init__(self) -> None:
        ports = [free_port() for _ in range(self.size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        common = {"controller.quorum.voters": voters, "cluster.secret": "test-cluster-secret-0123456789",
                  "cluster.id": "testcluster0000000000", "default.replication.factor": str(min(3, self.size)),
                  **FAST_CLUSTER, **self.overrides}
        self.nodes = [NodeProcess(self.root / f"node-{i + 1}", p, node_id=i + 1, overrides=dict(common),
                                  kafka_port=free_port() if self.kafka else None)
                      for i, p in enumerate(ports)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self, timeout_s: float = 60.0) -> "Cluster":
        for n in self.nodes:
            n.start(wait=False)
        for n in self.nodes:
            n.wait_ready(timeout_s)
        return self

    def node(self, node_id: int) -> NodeProcess:
        return self.nodes[node_id - 1]

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.running]

    def stop(self) -> None:
        for n in self.nodes:
            if n.running:
                try:
                    os.killpg(n.proc.pid, signal.SIGCONT)
                    n.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for n in self.nodes:
            try:
                n.stop()
            except Exception:
                pass
            n.kill()


def start_node(tmp_path: Path, *, kafka: bool = False, **overrides: str) -> NodeProcess:
    return NodeProcess(tmp_path / "data", free_port(), overrides=dict(overrides),
                       kafka_port=free_port() if kafka else None).start()


@contextlib.contextmanager
def running_node(tmp_path: Path, *, kafka: bool = False, **overrides: str) -> Iterator[NodeProcess]:
    """`start_node`, stopped (SIGTERM, then SIGKILL) when the block ends: the body of a fixture."""
    n = start_node(tmp_path, kafka=kafka, **overrides)
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()
