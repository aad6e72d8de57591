"""What `lakelog up` runs, validated before anything starts: `build_spec` -> `ClusterSpec`.

Every node is a controller voter (`controller.quorum.voters` lists them all, up to
MAX_LOCAL_NODES; more nodes than that is refused for now), and the nodes share a cluster id and a cluster
secret kept in `DATA_DIR/cluster.properties` (made on the first start, reused after). Topics default
to replication factor min(3, N) and `min.insync.replicas` min(2, N). The remote tier URL (`s3://bucket/prefix`
or `file:///path`, default `file://DATA_DIR/remote`) is validated and passed to every
node as `remote.storage.url` (all nodes share one remote tier). The spec also writes the command
lines of the children (`node_args`, `scheduler_args`, `sql_server_args`); `cli/launcher.py` runs them.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from urllib.parse import unquote, urlsplit

from lakelog.infra.config import ConfigError

DEFAULT_HTTP_PORT = 8082
#: Kafka listener (PLAINTEXT) of node 1; node i on DEFAULT_KAFKA_PORT + i - 1.
DEFAULT_KAFKA_PORT = 9092
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
    #: `lakelog up --kafka-port BASE`: node i's Kafka listener on BASE+i-1; None: none.
    kafka_port: int | None = DEFAULT_KAFKA_PORT
    #: The Kafka listener's security protocol: SASL_PLAINTEXT when the cluster authenticates.
    kafka_protocol: str = "PLAINTEXT"

    def node_kafka_port(self, node_id: int) -> int | None:
        return None if self.kafka_port is None else self.kafka_port + node_id - 1

    def node_listeners(self, node_id: int) -> str:
        """The node's `listeners`: its HTTP door, and its Kafka door when the cluster has one."""
        kafka = self.node_kafka_port(node_id)
        return self.node_url(node_id) + (f",{self.kafka_protocol}://{HOST}:{kafka}" if kafka is not None else "")

    @property
    def bootstrap_servers(self) -> str:
        """The Kafka clients' `bootstrap.servers` of the nodes this launcher runs ("" without Kafka doors)."""
        return ",".join(f"{HOST}:{self.node_kafka_port(i)}" for i in self.run_ids) if self.kafka_port else ""

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
                "--set", f"listeners={self.node_listeners(node_id)}",
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
               add_node: int | None = None, sql_thrift_port: int | None = None,
               kafka_port: int | None = DEFAULT_KAFKA_PORT) -> ClusterSpec:
    validate_node_count(nodes)
    if add_node is not None:
        return _added_node_spec(build_spec(nodes, data_dir, http_port, remote, node_overrides,
                                           kafka_port=kafka_port), add_node)
    if http_port < 1 or http_port + nodes - 1 > 65535:
        raise LauncherConfigError(f"--http-port {http_port}: ports {http_port}..{http_port + nodes - 1} "
                                  "must lie in 1..65535")
    if kafka_port is not None and (kafka_port < 1 or kafka_port + nodes - 1 > 65535 or
                                   (kafka_port < http_port + nodes and http_port < kafka_port + nodes)):
        raise LauncherConfigError(f"--kafka-port {kafka_port}: ports {kafka_port}..{kafka_port + nodes - 1} must lie "
                                  f"in 1..65535 and not overlap the HTTP ports {http_port}..{http_port + nodes - 1}")
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
    # A node that authenticates refuses a PLAINTEXT Kafka listener (ingest_api/config/kafka.py).
    authenticates = overrides.get("authentication.enabled", "false").strip().lower() == "true"
    spec = ClusterSpec(nodes, root, http_port, remote_tier, overrides, jobs, sql_port,
                       sql_thrift_port=sql_thrift_port, kafka_port=kafka_port,
                       kafka_protocol="SASL_PLAINTEXT" if authenticates else "PLAINTEXT")
    from lakelog.ingest_api.config.node import NodeConfig

    for i in range(1, nodes + 1):
        try:  # refuse a bad --set here, not as a node that dies at start
            NodeConfig({**overrides, "node.id": i, "log.dirs": str(spec.node_dir(i)),
                        "listeners": spec.node_listeners(i)})
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
                         if not port_in_use(spec.node_port(i))), MAX_ADDED_NODE_ID + 1)
    if not spec.nodes < add_node <= MAX_ADDED_NODE_ID:
        raise LauncherConfigError(f"--add-node {add_node}: an added node's id is above the {spec.nodes} voters and "
                                  f"at most {MAX_ADDED_NODE_ID}")
    if spec.node_port(add_node) > 65535:
        raise LauncherConfigError(f"--add-node {add_node}: its port {spec.node_port(add_node)} is above 65535")
    return dataclasses.replace(spec, added_nodes=(add_node,), jobs_every={}, sql_port=None)


def port_in_use(port: int) -> bool:
    # SO_REUSEADDR as uvicorn binds: a port in TIME_WAIT is usable, one with a listener is not.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False
