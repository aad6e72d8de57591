"""`lakelog up`: a local cluster in the foreground, on the embedded defaults, supervised.

Node i (1..N) is a child process `lakelog node` with `node.id=i`, serving HTTP on `127.0.0.1:BASE+i-1`
with its partition logs under `DATA_DIR/node-i/`. The launcher prints where each node listens,
waits until every node answers `/readyz`, prints the ready line, then supervises:

  * a node that dies (after the cluster was ready) is reported in one line and started again
    with the same data directory after a backoff (1 s, doubling to 30 s; back to 1 s after a
    minute of running); the others keep serving. `--exit-on-node-death` (for scripts) keeps the
    older rule instead: the first death stops the others and `lakelog up` exits 1;
  * a node that dies before the cluster is ready stops everything (exit 1): that is a
    configuration or environment problem, not a crash to retry;
  * Ctrl-C or SIGTERM: every node gets SIGTERM (a node whose leaderships can move elsewhere
    does a controlled shutdown first; it closes its logs cleanly, leaving the clean-shutdown
    marker), is waited for up to `stop_timeout_s`, then SIGKILLed (at once on a second Ctrl-C);
    exit 0 when every node stopped by itself with status 0, else 1.

Output: every line a node prints (JSON, one object per line) goes to `DATA_DIR/node-i/node.log`
(moved to `node.log.1` at 64 MiB). The console gets the launcher's own lines and, from the nodes,
only what a person should see: notices (started, registered, active controller, stopped) and
warnings or errors, one human line each, repeats rate-limited (infra/logs.py). `--verbose`
forwards every node line to stderr instead, as before.

Nodes run in their own sessions, so a terminal's Ctrl-C reaches the launcher only and the shutdown
is the launcher's one SIGTERM per node. On Linux a node also gets SIGKILL if the launcher dies
without stopping it (PR_SET_PDEATHSIG), so a killed launcher leaves no orphan holding a port.

`--sql` also runs `lakelog sql-server` (Spark Connect on loopback, `--sql-port`, default 15002)
once the nodes are ready, supervised like them, its output in `DATA_DIR/sql.log`; its clients
present the token kept in `DATA_DIR/sql.token` (0600). It also answers the web console's SQL page
and `lakelog sql` (JSON on `--sql-port` + 1, same token; its address in `DATA_DIR/sql.http`): the
nodes get `console.sql.url` and `console.sql.token.file`. With the cluster's authentication on, the
SQL server gets a service user of its own (cli/sql_service.py). `--sql-thrift-port N` adds the
Thrift JDBC/ODBC server (the token as the password; not with authentication on).

Every node is a controller voter (`controller.quorum.voters` lists them all, up to
MAX_VOTERS; more nodes than that is refused for now), and the nodes share a cluster id and a cluster
secret kept in `DATA_DIR/cluster.properties` (made on the first start, reused after). Topics default
to replication factor min(3, N) and `min.insync.replicas` min(2, N). The remote tier URL (`s3://bucket/prefix`
or `file:///path`, default `file://DATA_DIR/remote`) is validated and passed to every
node as `remote.storage.url` (all nodes share one remote tier).
"""

from __future__ import annotations

import dataclasses
import collections
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Mapping
from urllib.parse import unquote, urlsplit

import httpx

from lakelog.infra.config import ConfigError
from lakelog.infra.logs import RepeatLimiter, human_line, is_notice, parse_json_line, suppressed_note, template_key

DEFAULT_HTTP_PORT = 8082
DEFAULT_DATA_DIR = "./data"
HOST = "127.0.0.1"
#: Largest local cluster: every node is a controller voter, and Raft quorums stay small.
MAX_LOCAL_NODES = 5
#: Highest node id `lakelog up --add-node` gives a broker added to a local cluster.
MAX_ADDED_NODE_ID = 32
DEFAULT_NODES = 3
CLUSTER_PROPERTIES = "cluster.properties"
#: The SQL server's client token (`lakelog up --sql`), 0600 beside cluster.properties.
SQL_TOKEN_FILE = "sql.token"
#: Keys the launcher sets per node; `--set` may not override them.
RESERVED_NODE_KEYS = ("node.id", "log.dirs", "listeners", "controller.quorum.voters", "cluster.id",
                      "cluster.secret", "cluster.secret.file")
READY_TIMEOUT_S = 60.0
#: A node's own clean stop is bounded by shutdown.timeout.ms (10 s) plus uvicorn's 5 s grace.
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.1
READY_PROBE_TIMEOUT_S = 0.5
LOG_TAIL_LINES = 20
NODE_LOG_FILE = "node.log"
NODE_LOG_MAX_BYTES = 64 * 1024 * 1024
#: Restart backoff of a supervised child: first delay, cap, and the run after which it starts over.
RESTART_BACKOFF_INITIAL_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
RESTART_STABLE_S = 60.0
#: The console shows at most CONSOLE_BURST node lines of one kind (numbers blanked) per window.
CONSOLE_BURST = 3
#: ... and at most CONSOLE_NODE_BURST warnings or errors of one node per window.
CONSOLE_NODE_BURST = 6
CONSOLE_WINDOW_S = 10.0

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class LauncherConfigError(ConfigError):
    """`lakelog up` was asked for something it cannot run (node count, ports, remote URL)."""


@dataclass(frozen=True)
class RemoteTier:
    """Where sealed segments will go: an S3 bucket and prefix, or a local directory."""

    url: str
    scheme: str  # "s3" or "file"
    bucket: str | None = None
    prefix: str = ""
    path: Path | None = None


def parse_remote_url(url: str) -> RemoteTier:
    """Validate `s3://bucket[/prefix]` or `file:///absolute/path`."""
    parts = urlsplit(url)
    if parts.scheme == "s3":
        bucket = parts.netloc
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise LauncherConfigError(f"--remote {url!r}: {bucket!r} is not a valid S3 bucket name "
                                      "(3-63 lowercase letters, digits, '.' or '-')")
        if parts.query or parts.fragment:
            raise LauncherConfigError(f"--remote {url!r}: an S3 URL takes no query or fragment")
        return RemoteTier(url, "s3", bucket=bucket, prefix=parts.path.strip("/"))
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise LauncherConfigError(f"--remote {url!r}: a file URL names a local path: file:///path")
        path = unquote(parts.path)
        if not path.startswith("/") or parts.query or parts.fragment:
            raise LauncherConfigError(f"--remote {url!r}: expected file:///absolute/path")
        return RemoteTier(url, "file", path=Path(path))
    raise LauncherConfigError(f"--remote {url!r}: expected s3://bucket/prefix or file:///path")


def validate_node_count(nodes: int) -> int:
    if nodes < 1:
        raise LauncherConfigError(f"--nodes must be at least 1, not {nodes}")
    if nodes > MAX_LOCAL_NODES:
        raise LauncherConfigError(
            f"--nodes {nodes}: a local cluster has at most {MAX_LOCAL_NODES} nodes (every node is a controller "
            f"voter)")
    return nodes


@dataclass(frozen=True)
class ClusterSpec:
    """What `lakelog up` runs: validated, with absolute paths."""

    nodes: int
    data_dir: Path
    http_port: int
    remote: RemoteTier
    node_overrides: Mapping[str, str] = field(default_factory=dict)
    #: Spark job intervals (job -> seconds) for the scheduler `lakelog up --jobs` runs beside the
    #: nodes; empty: no scheduler.
    jobs_every: Mapping[str, float] = field(default_factory=dict)
    #: Port of the SQL server (`lakelog sql-server`, Spark Connect) `lakelog up --sql` runs beside
    #: the nodes, on loopback; None: no SQL server.
    sql_port: int | None = None

    @property
    def sql_url(self) -> str:
        return f"sc://{HOST}:{self.sql_port}"

    def sql_server_args(self) -> list[str]:
        """The `lakelog sql-server` command line: the nodes' remote tier, every node for the hot tail."""
        nodes = ",".join(self.node_url(i) for i in range(1, self.nodes + 1))
        return [sys.executable, "-m", "lakelog.cli.main", "sql-server", "--remote", self.remote.url,
                "--nodes", nodes, "--listen", self.sql_url, "--token-file", str(self.sql_token_path),
                "--http-listen", self.sql_http_url] + (
                    ["--thrift-port", str(self.sql_thrift_port)] if self.sql_thrift_port is not None else [])

    @property
    def sql_http_url(self) -> str:
        """The SQL server's JSON endpoint for the nodes' web console: the port after Spark Connect's."""
        return f"http://{HOST}:{self.sql_port + 1}"

    @property
    def sql_token_path(self) -> Path:
        return self.data_dir / SQL_TOKEN_FILE
    #: `lakelog up --add-node`: run only these node ids (brokers beyond the `nodes` voters, joining the
    #: cluster the voters' `lakelog up` runs); empty: run the voters 1..nodes.
    added_nodes: tuple[int, ...] = ()
    #: `lakelog up --sql --sql-thrift-port N`: the SQL server's Thrift JDBC/ODBC server (loopback); None: none.
    sql_thrift_port: int | None = None

    @property
    def run_ids(self) -> list[int]:
        """The node ids this launcher runs."""
        return list(self.added_nodes) or list(range(1, self.nodes + 1))

    def scheduler_args(self) -> list[str]:
        """The `lakelog jobs schedule` command line (same remote tier as the nodes)."""
        args = [sys.executable, "-m", "lakelog.cli.main", "jobs", "schedule", "--remote", self.remote.url]
        for job, seconds in self.jobs_every.items():
            args += ["--every", f"{job}={seconds:g}"]
        return args

    def node_port(self, node_id: int) -> int:
        return self.http_port + node_id - 1

    def node_url(self, node_id: int) -> str:
        return f"http://{HOST}:{self.node_port(node_id)}"

    def node_dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}"

    @property
    def voters(self) -> str:
        return ",".join(f"{i}@{HOST}:{self.node_port(i)}" for i in range(1, self.nodes + 1))

    def default_overrides(self) -> dict[str, str]:
        defaults = {"default.replication.factor": str(min(3, self.nodes)),
                    "min.insync.replicas": str(min(2, self.nodes))}
        if self.sql_port is not None:  # the console's SQL page runs queries through the SQL server
            defaults.update({"console.sql.url": self.sql_http_url, "console.sql.token.file": str(self.sql_token_path)})
        return defaults

    def node_args(self, node_id: int, cluster_id: str = "", secret: str = "") -> list[str]:
        """The `lakelog node` command line of node `node_id`."""
        args = [sys.executable, "-m", "lakelog.cli.main", "node",
                "--set", f"node.id={node_id}",
                "--set", f"log.dirs={self.node_dir(node_id)}",
                "--set", f"listeners={self.node_url(node_id)}",
                "--set", f"controller.quorum.voters={self.voters}"]
        if cluster_id:
            args += ["--set", f"cluster.id={cluster_id}"]
        if secret:  # by file, never on the command line (any local user can read that with ps)
            args += ["--set", f"cluster.secret.file={self.data_dir / CLUSTER_PROPERTIES}"]
        # Every node shares the one remote tier.
        args += ["--set", f"remote.storage.url={self.remote.url}"]
        for k, v in {**self.default_overrides(), **self.node_overrides}.items():
            args += ["--set", f"{k}={v}"]
        return args


def load_or_create_cluster_properties(data_dir: Path) -> tuple[str, str]:
    """(cluster id, cluster secret) of the local cluster in `data_dir`, made on the first start."""
    import secrets
    import uuid

    from lakelog.logstore.fileutil import atomic_write

    path = data_dir / CLUSTER_PROPERTIES
    if path.exists():
        props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        return props["cluster.id"].strip(), props["cluster.secret"].strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster_id, secret = uuid.uuid4().hex[:22], secrets.token_hex(32)
    atomic_write(path, f"cluster.id={cluster_id}\ncluster.secret={secret}\n".encode(), mode=0o600)
    return cluster_id, secret


def load_or_create_sql_token(path: Path) -> str:
    """The SQL server's token: only who can read the data directory can query the topics."""
    import secrets

    from lakelog.logstore.fileutil import atomic_write

    if path.exists():
        return path.read_text().strip()
    token = secrets.token_hex(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, f"{token}\n".encode(), mode=0o600)
    return token


def build_spec(nodes: int = DEFAULT_NODES, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, http_port: int = DEFAULT_HTTP_PORT,
               remote: str | None = None, node_overrides: Mapping[str, str] | None = None,
               jobs_every: Mapping[str, float] | None = None, sql_port: int | None = None,
               add_node: int | None = None, sql_thrift_port: int | None = None) -> ClusterSpec:
    validate_node_count(nodes)
    if add_node is not None:
        return _added_node_spec(build_spec(nodes, data_dir, http_port, remote, node_overrides), add_node)
    if http_port < 1 or http_port + nodes - 1 > 65535:
        raise LauncherConfigError(f"--http-port {http_port}: ports {http_port}..{http_port + nodes - 1} "
                                  "must lie in 1..65535")
    root = Path(data_dir).expanduser().resolve()
    remote_tier = parse_remote_url(remote if remote is not None else (root / "remote").as_uri())
    overrides = dict(node_overrides or {})
    for key in overrides:
        if key in RESERVED_NODE_KEYS:
            raise LauncherConfigError(f"--set {key}: the launcher sets {', '.join(RESERVED_NODE_KEYS)} itself")
    jobs = dict(jobs_every or {})
    for job, seconds in jobs.items():
        if job not in ("compaction", "retention", "rebuild-index", "sync-tables") or not 0 <= seconds <= 7 * 86400:
            raise LauncherConfigError(f"--jobs-every {job}={seconds}: a job is compaction, retention, rebuild-index "
                                      "or sync-tables, every 0 (off) to 604800 seconds")
    if sql_port is not None and (not 1 <= sql_port < 65535 or http_port - 1 <= sql_port < http_port + nodes):
        raise LauncherConfigError(f"--sql-port {sql_port}: a port in 1..65534 that no node uses, nor the one "
                                  f"after it (the console's SQL calls)")
    if sql_thrift_port is not None:
        if sql_port is None:
            raise LauncherConfigError("--sql-thrift-port: only with --sql (the Thrift server runs in the SQL server)")
        if overrides.get("authentication.enabled", "false").strip().lower() == "true":
            raise LauncherConfigError("--sql-thrift-port: the Thrift JDBC/ODBC server does not run while the cluster's "
                                      "authentication is on (it cannot apply the users' READ ACLs)")
        if sql_thrift_port in (sql_port, sql_port + 1) or http_port <= sql_thrift_port < http_port + nodes:
            raise LauncherConfigError(f"--sql-thrift-port {sql_thrift_port}: a port no node nor the SQL server uses")
    spec = ClusterSpec(nodes, root, http_port, remote_tier, overrides, jobs, sql_port,
                       sql_thrift_port=sql_thrift_port)
    from lakelog.ingest_api.config import NodeConfig

    for i in range(1, nodes + 1):
        try:  # refuse a bad --set here, not as a node that dies at start
            NodeConfig({**overrides, "node.id": i, "log.dirs": str(spec.node_dir(i)), "listeners": spec.node_url(i)})
        except ConfigError as e:
            raise LauncherConfigError(f"--set: {e}") from None
    return spec


def _added_node_spec(spec: ClusterSpec, add_node: int) -> ClusterSpec:
    """`lakelog up --add-node [ID]`: one more broker for the running local cluster in the same data dir.

    ID 0 picks the first id above the voters whose port is free. The cluster's id and secret come from
    its cluster.properties, so the cluster must have been started by `lakelog up` in that directory."""
    if not (spec.data_dir / CLUSTER_PROPERTIES).exists():
        raise LauncherConfigError(f"--add-node: no cluster in {spec.data_dir} (start it first: lakelog up "
                                  f"--data-dir {spec.data_dir})")
    if add_node == 0:
        add_node = next((i for i in range(spec.nodes + 1, MAX_ADDED_NODE_ID + 1)
                         if not _port_in_use(spec.node_port(i))), MAX_ADDED_NODE_ID + 1)
    if not spec.nodes < add_node <= MAX_ADDED_NODE_ID:
        raise LauncherConfigError(f"--add-node {add_node}: an added node's id is above the {spec.nodes} voters and "
                                  f"at most {MAX_ADDED_NODE_ID}")
    if spec.node_port(add_node) > 65535:
        raise LauncherConfigError(f"--add-node {add_node}: its port {spec.node_port(add_node)} is above 65535")
    return dataclasses.replace(spec, added_nodes=(add_node,), jobs_every={}, sql_port=None)


def _port_in_use(port: int) -> bool:
    # SO_REUSEADDR as uvicorn binds: a port in TIME_WAIT is usable, one with a listener is not.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def _pdeathsig_hook():
    """A pre-exec hook (Linux) that makes the kernel SIGKILL the child when the launcher dies.

    libc's prctl is looked up here, in the parent: after fork the child only calls it, with no
    import or loader lock that another launcher thread might have held at the fork.
    """
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # best effort: a SIGKILLed launcher may then orphan its nodes
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return hook


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def command_hint(cwd: Path | None = None) -> str:
    """How to type `lakelog` here: the bare name when the PATH finds this very command, else its path."""
    mine = Path(sys.executable).with_name("lakelog")
    found = shutil.which("lakelog")
    if found is not None and (not mine.exists() or Path(found).resolve() == mine.resolve()):
        return "lakelog"
    if not mine.exists():
        return f"{Path(sys.executable)} -m lakelog.cli.main"
    try:
        return str(mine.relative_to((cwd or Path.cwd()).resolve()))
    except ValueError:
        return str(mine)


class Backoff:
    """Restart delays: initial_s, doubling to max_s; back to initial_s after a run of stable_s or more."""

    def __init__(self, initial_s: float = RESTART_BACKOFF_INITIAL_S, max_s: float = RESTART_BACKOFF_MAX_S,
                 stable_s: float = RESTART_STABLE_S) -> None:
        self.initial_s, self.max_s, self.stable_s = initial_s, max_s, stable_s
        self._next = initial_s

    def after_run(self, ran_s: float) -> float:
        """The delay before restarting a child that ran `ran_s` seconds."""
        if ran_s >= self.stable_s:
            self._next = self.initial_s
        delay = self._next
        self._next = min(self.max_s, self._next * 2)
        return delay


class NodeLogFile:
    """A child's own log: every line it prints, appended to `path`; at `max_bytes` it moves to `path.1`."""

    def __init__(self, path: Path, max_bytes: int = NODE_LOG_MAX_BYTES) -> None:
        self.path, self.max_bytes = path, max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[bytes] | None = open(path, "ab")

    def write(self, line: bytes) -> None:
        if self._f is None:
            return
        try:
            if self._f.tell() + len(line) > self.max_bytes:
                self._f.close()
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                self._f = open(self.path, "ab")
            self._f.write(line)
            self._f.flush()
        except OSError:  # a full disk must not stop the forwarding (the pipe would fill and block the node)
            pass

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class Console:
    """The launcher's terminal: its own lines, and the node lines worth a person's attention, one lock.

    Node lines are rate-limited twice: per kind (numbers blanked, CONSOLE_BURST per window) and, for
    warnings and errors, per node (CONSOLE_NODE_BURST per window), so that a recovery that warns
    about every partition shows a few lines and a count, not a screenful. `flush_suppressed` prints
    those counts once their window is over.
    """

    def __init__(self, out: IO[str], *, verbose_out: IO[bytes] | None = None) -> None:
        self.out = out
        #: --verbose: every node line, as the node printed it (JSON), prefixed with the node's name.
        self.verbose_out = verbose_out
        self._lock = threading.Lock()
        self._kinds = RepeatLimiter(burst=CONSOLE_BURST, window_s=CONSOLE_WINDOW_S, key=template_key)
        self._per_node = RepeatLimiter(burst=CONSOLE_NODE_BURST, window_s=CONSOLE_WINDOW_S,
                                       key=lambda source, level, _msg: (source,))

    def say(self, text: str) -> None:
        with self._lock:
            self._print(text)

    def _print(self, text: str) -> None:
        try:
            print(text, file=self.out, flush=True)
        except (OSError, ValueError):  # the terminal went away; the nodes' own logs still have it all
            pass

    def node_line(self, source: str, line: bytes) -> None:
        if self.verbose_out is not None:
            with self._lock:
                try:
                    self.verbose_out.write(f"{source} | ".encode() + line)
                    self.verbose_out.flush()
                except (OSError, ValueError):
                    self.verbose_out = None
            return
        doc = parse_json_line(line.decode("utf-8", "replace"))
        if doc is None or not is_notice(doc):
            return
        level, msg = str(doc.get("level")), str(doc.get("msg"))
        with self._lock:
            ok, _ = self._kinds.admit(source, level, msg)
            if ok and not doc.get("notice"):
                ok, _ = self._per_node.admit(source, level, msg)
            if ok:
                self._print(human_line(source, doc))

    def flush_suppressed(self) -> None:
        """One line per node whose lines were held back in a window that has ended."""
        with self._lock:
            counts: collections.Counter[str] = collections.Counter()
            for limiter in (self._kinds, self._per_node):
                for key, n in limiter.drain_suppressed():
                    counts[key[0]] += n
            for source, n in sorted(counts.items()):
                self._print(f"{time.strftime('%H:%M:%S')} {source:<7} ... and {n} more line(s) like these "
                            f"(see its log file)")


class NodeChild:
    """One `lakelog node` child: its process, and a thread copying its output to its log file and the console."""

    def __init__(self, spec: ClusterSpec, node_id: int, console: Console) -> None:
        self.node_id = node_id
        self.name = f"node-{node_id}"
        self.url = spec.node_url(node_id)
        self.args = spec.node_args(node_id, *load_or_create_cluster_properties(spec.data_dir))
        self.data_dir = spec.node_dir(node_id)
        self.log_path = self.data_dir / NODE_LOG_FILE
        self._init_runtime(console)

    def _init_runtime(self, console: Console) -> None:
        self.tail: collections.deque[bytes] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._console = console
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self.killed = False
        self.started_at = 0.0
        self.restarts = 0
        self.backoff = Backoff()
        #: While the child is down: the monotonic time of its restart.
        self.restart_at: float | None = None
        #: After a restart: not yet answering /readyz.
        self.coming_back = False
        #: Added to the child's environment (the SQL server's service credentials: cli/sql_service.py).
        self.extra_env: dict[str, str] = {}

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.extra_env)
        self.killed = False
        self.tail.clear()
        self.proc = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, preexec_fn=_pdeathsig_hook())
        self.started_at = time.monotonic()
        self._reader = threading.Thread(target=self._forward, args=(self.proc.stdout,), name=f"{self.name}-output",
                                        daemon=True)
        self._reader.start()

    def _forward(self, pipe: IO[bytes]) -> None:
        log_file = NodeLogFile(self.log_path)
        try:
            for line in iter(pipe.readline, b""):
                self.tail.append(line)
                log_file.write(line)
                self._console.node_line(self.name, line)
        finally:
            log_file.close()
            pipe.close()

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def is_ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=READY_PROBE_TIMEOUT_S).status_code == 200
        except httpx.HTTPError:
            return False

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the node's process group (it runs in its own session)."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, deadline: float) -> int:
        """Wait for the exit until `deadline` (monotonic); SIGKILL the node's group after it."""
        if self.proc is None:
            return 0
        try:
            code = self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        self.join_output()
        return code

    def join_output(self) -> None:
        if self._reader is not None:
            self._reader.join(2.0)

    def tail_text(self) -> str:
        return b"".join(self.tail).decode("utf-8", "replace")

    def last_words(self) -> str:
        """The child's last message: its last log line's text, or its last raw line (a traceback's end)."""
        for raw in reversed(self.tail):
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                continue
            doc = parse_json_line(text)
            return str(doc.get("msg")) if doc is not None else text
        return ""


class SchedulerChild(NodeChild):
    """The `lakelog jobs schedule` child of `lakelog up --jobs` (Spark jobs over the remote tier)."""

    def __init__(self, spec: ClusterSpec, console: Console) -> None:  # noqa: D107
        self.node_id = 0
        self.name = "jobs"
        self.url = ""
        self.args = spec.scheduler_args()
        self.data_dir = spec.data_dir
        self.log_path = spec.data_dir / "jobs.log"
        self._init_runtime(console)

    def is_ready(self) -> bool:
        return True


class SqlServerChild(NodeChild):
    """The `lakelog sql-server` child of `lakelog up --sql`: Spark SQL (Spark Connect) over the
    topics, on loopback. Ready when its port accepts connections (after its JVM started)."""

    def __init__(self, spec: ClusterSpec, console: Console) -> None:  # noqa: D107
        self.node_id = 0
        self.name = "sql"
        self.url = spec.sql_url
        self.port = spec.sql_port
        self.args = spec.sql_server_args()
        self.data_dir = spec.data_dir
        self.log_path = spec.data_dir / "sql.log"
        self._init_runtime(console)

    def is_ready(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=READY_PROBE_TIMEOUT_S):
                return True
        except OSError:
            return False


class LocalCluster:
    """Runs a ClusterSpec in the foreground: `run()` returns the exit status of `lakelog up`.

    By default it supervises: a child that dies after the cluster was ready is reported in one line
    and restarted (same data directory) after a backoff. `exit_on_death` keeps the older behaviour:
    the first death stops the others and `run()` returns 1.
    """

    def __init__(self, spec: ClusterSpec, *, out: IO[str] | None = None, verbose_out: IO[bytes] | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S, stop_timeout_s: float = STOP_TIMEOUT_S,
                 exit_on_death: bool = False) -> None:
        self.spec = spec
        self.console = Console(out if out is not None else sys.stdout, verbose_out=verbose_out)
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.exit_on_death = exit_on_death
        self.children: list[NodeChild] = []
        self._stop = threading.Event()
        self._stop_signal: str | None = None
        self._stopping = False

    def _say(self, text: str) -> None:
        self.console.say(text)

    def request_stop(self, signum: int | None = None, _frame: object = None) -> None:
        """Signal handler: the first signal stops the nodes cleanly, a second one during that kills them."""
        if self._stopping:
            for c in self.children:
                c.kill()
            return
        if signum is not None and self._stop_signal is None:
            self._stop_signal = signal.Signals(signum).name
        self._stop.set()

    def run(self) -> int:
        previous = {s: signal.signal(s, self.request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run()
        finally:
            self.stop()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _run(self) -> int:
        spec = self.spec
        for i in spec.run_ids:
            if _port_in_use(spec.node_port(i)):
                raise LauncherConfigError(f"port {spec.node_port(i)} (node {i}) is already in use; "
                                          "choose another --http-port")
        sql_ports = (spec.sql_port, spec.sql_port + 1) if spec.sql_port is not None else ()
        for port in sql_ports + ((spec.sql_thrift_port,) if spec.sql_thrift_port is not None else ()):
            if _port_in_use(port):
                raise LauncherConfigError(f"port {port} (the SQL server) is already in use; "
                                          "choose another --sql-port")
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        noun = "node" if spec.nodes == 1 else "nodes"
        if spec.added_nodes:
            self._say(f"lakelog up --add-node: node {', '.join(map(str, spec.added_nodes))} joins the cluster of "
                      f"{spec.nodes} {noun} in {spec.data_dir} (as a broker; the voters stay 1..{spec.nodes})")
        else:
            self._say(f"lakelog up: {spec.nodes} {noun}, data in {spec.data_dir}")
        self._say(f"  remote tier {spec.remote.url} (shared by every node; topics opt in with remote.storage.enable)")
        for i in spec.run_ids:
            child = NodeChild(spec, i, self.console)
            self.children.append(child)
            child.start()
            self._say(f"  node {i}: {child.url}  (pid {child.proc.pid}, data {child.data_dir}, "
                      f"log {child.log_path.name})")

        pending = list(self.children)
        deadline = time.monotonic() + self.ready_timeout_s
        while pending:
            if self._stop.is_set():
                return self._finish(0)
            if (failed := self._exited_child()) is not None:
                return self._report_exit(failed)  # dying before the cluster is up is not a crash to retry
            pending = [c for c in pending if not c.is_ready()]
            if not pending:
                break
            if time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                self._say(f"lakelog up: {names} not ready after {self.ready_timeout_s:g} s; stopping")
                return self._finish(1)
            self.console.flush_suppressed()
            self._stop.wait(POLL_INTERVAL_S)
        if spec.jobs_every and not spec.added_nodes:
            scheduler = SchedulerChild(spec, self.console)
            self.children.append(scheduler)
            scheduler.start()
            self._say(f"  jobs: {', '.join(f'{j} every {s:g}s' for j, s in spec.jobs_every.items() if s)} "
                      f"(pid {scheduler.proc.pid}; Spark in local mode)")
        if spec.sql_port is not None and not spec.added_nodes:
            load_or_create_sql_token(spec.sql_token_path)
            sql = SqlServerChild(spec, self.console)
            try:  # with authentication on, a service user of its own to read the nodes (cli/sql_service.py)
                from lakelog.cli.sql_service import SqlServiceError, service_environment

                sql.extra_env = service_environment(spec.node_url(1), spec.data_dir,
                                                    load_or_create_cluster_properties(spec.data_dir)[1])
            except (SqlServiceError, httpx.HTTPError) as e:
                self._say(f"lakelog up: cannot give the SQL server credentials of its own ({e}); stopping")
                return self._finish(1)
            self.children.append(sql)
            sql.start()
            sql.coming_back = True  # announced when its port answers (its JVM takes a few seconds)
            self._say(f"  sql: {sql.url} (pid {sql.proc.pid}, log {sql.log_path.name}; Spark Connect, starting; "
                      f"`lakelog sql` uses it)")
        self._say("")
        self._say(f"lakelog up: ready. Try: {command_hint()} topics create demo --bootstrap-server {spec.node_url(1)}")
        self._say(f"Web console: {spec.node_url(1)}/ (in a browser; any node serves it)")
        self._say("Press Ctrl-C to stop." + ("" if self.exit_on_death else
                                              " A node that dies is restarted; its data stays."))

        while not self._stop.wait(POLL_INTERVAL_S):
            self.console.flush_suppressed()
            for child in self.children:
                if self._stop.is_set():
                    break
                if self._supervise(child) is not None:
                    return 1
        return self._finish(0)

    def _supervise(self, child: NodeChild) -> int | None:
        """One look at a child: report and schedule a death, restart when due, announce a comeback.

        Returns 1 when `exit_on_death` ends the run.
        """
        now = time.monotonic()
        if child.restart_at is None and child.poll() is not None:
            if self.exit_on_death:
                return self._report_exit(child)
            child.join_output()
            delay = child.backoff.after_run(now - child.started_at)
            child.restart_at = now + delay
            words = child.last_words() if child.proc.returncode > 0 else ""
            self._say(f"lakelog up: {child.name} (pid {child.proc.pid}) {describe_exit(child.proc.returncode)}"
                      + (f" ({words[:200]})" if words else "")
                      + f"; restarting it in {delay:g} s, with its data")
        elif child.restart_at is not None and now >= child.restart_at:
            child.restart_at = None
            child.restarts += 1
            child.start()
            child.coming_back = True
        elif child.coming_back and child.poll() is None and child.is_ready():
            child.coming_back = False
            if child.restarts == 0:  # a child started after the nodes (the SQL server): ready now
                self._say(f"lakelog up: {child.name} is ready on {child.url} (pid {child.proc.pid})")
            else:
                self._say(f"lakelog up: {child.name} is back (pid {child.proc.pid}, restart {child.restarts})")
        return None

    def _exited_child(self) -> NodeChild | None:
        return next((c for c in self.children if c.restart_at is None and c.poll() is not None), None)

    def _report_exit(self, child: NodeChild) -> int:
        self._say(f"lakelog up: {child.name} (pid {child.proc.pid}) {describe_exit(child.proc.returncode)} "
                  "unexpectedly; stopping the others")
        child.join_output()
        tail = child.tail_text().rstrip()
        if tail:
            self._say(f"  last output of {child.name} (all of it in {child.log_path}):\n"
                      + "\n".join(f"    {ln}" for ln in tail.splitlines()))
        self._finish(1)
        return 1

    def _finish(self, status: int) -> int:
        if self._stop_signal:
            running = sum(1 for c in self.children if c.poll() is None)
            self._say(f"lakelog up: {self._stop_signal} received; stopping {running} process(es)")
        started = time.monotonic()
        clean = self.stop()
        if status == 0 and clean:
            self._say(f"lakelog up: stopped cleanly in {time.monotonic() - started:.1f} s")
        return status if clean else 1

    def stop(self) -> bool:
        """SIGTERM every running child, wait up to stop_timeout_s, SIGKILL the rest. True if all exited 0."""
        for c in self.children:
            c.restart_at = None  # no restart during the stop
        running = [c for c in self.children if c.poll() is None]
        self._stopping = bool(running)
        for c in running:
            c.terminate()
        deadline = time.monotonic() + self.stop_timeout_s
        clean = True
        for c in running:
            code = c.wait(deadline)
            if c.killed:
                self._say(f"lakelog up: {c.name} did not stop by itself; killed it")
                clean = False
            elif code != 0:
                self._say(f"lakelog up: {c.name} {describe_exit(code)} while stopping")
                clean = False
        return clean
