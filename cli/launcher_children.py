"""The processes `lakelog up` launches: a `lakelog node` per node id (`NodeChild`), the `lakelog jobs
schedule` of `--jobs` (`SchedulerChild`) and the `lakelog sql-server` of `--sql` (`SqlServerChild`),
each a `ChildProcess` with its own command line, log file and readiness probe.

A `ChildProcess` owns its process and its output, nothing else: each child runs in its own session
(a terminal's Ctrl-C reaches the launcher only) and, on Linux, gets SIGKILL if the launcher dies
without stopping it (PR_SET_PDEATHSIG). A thread copies every line it prints to its own log file
(`NodeLogFile`, moved to `.1` at 64 MiB) and to the console (cli/launcher_console.py). When and
how often a child is restarted is the supervisor's (`RestartState` in cli/launcher.py), spaced by
a `Backoff`.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import httpx

from lakelog.cli.cluster_spec import HOST, ClusterSpec, load_or_create_cluster_properties
from lakelog.cli.launcher_console import Console
from lakelog.infra.logs import parse_json_line

READY_PROBE_TIMEOUT_S = 0.5
LOG_TAIL_LINES = 20
NODE_LOG_FILE = "node.log"
NODE_LOG_MAX_BYTES = 64 * 1024 * 1024
#: Restart backoff of a supervised child: first delay, cap, and the run after which it starts over.
RESTART_BACKOFF_INITIAL_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
RESTART_STABLE_S = 60.0


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


class ChildProcess:
    """One child process: started (again) from its command line, its output copied to its log file and
    the console. Subclasses say how to probe readiness (`is_ready`)."""

    def __init__(self, name: str, url: str, args: list[str], data_dir: Path, log_path: Path, console: Console,
                 extra_env: dict[str, str] | None = None) -> None:
        self.name, self.url, self.args = name, url, args
        self.data_dir, self.log_path = data_dir, log_path
        #: Added to the child's environment (the SQL server's service credentials: cli/sql_service.py).
        self.extra_env = dict(extra_env or {})
        self.tail: collections.deque[bytes] = collections.deque(maxlen=LOG_TAIL_LINES)
        self._console = console
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self.killed = False
        #: Monotonic time of the last start.
        self.started_at = 0.0

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
        raise NotImplementedError

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the child's process group (it runs in its own session)."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, deadline: float) -> int:
        """Wait for the exit until `deadline` (monotonic); SIGKILL the child's group after it."""
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


class NodeChild(ChildProcess):
    """One `lakelog node` child: ready when it answers `/readyz`."""

    def __init__(self, spec: ClusterSpec, node_id: int, console: Console) -> None:
        data_dir = spec.node_dir(node_id)
        super().__init__(f"node-{node_id}", spec.node_url(node_id),
                         spec.node_args(node_id, *load_or_create_cluster_properties(spec.data_dir)),
                         data_dir, data_dir / NODE_LOG_FILE, console)
        self.node_id = node_id

    def is_ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=READY_PROBE_TIMEOUT_S).status_code == 200
        except httpx.HTTPError:
            return False


class SchedulerChild(ChildProcess):
    """The `lakelog jobs schedule` child of `lakelog up --jobs` (Spark jobs over the remote tier)."""

    def __init__(self, spec: ClusterSpec, console: Console) -> None:
        super().__init__("jobs", "", spec.scheduler_args(), spec.data_dir, spec.data_dir / "jobs.log", console)

    def is_ready(self) -> bool:
        return True


class SqlServerChild(ChildProcess):
    """The `lakelog sql-server` child of `lakelog up --sql`: Spark SQL (Spark Connect) over the
    topics, on loopback. Ready when its port accepts connections (after its JVM started)."""

    def __init__(self, spec: ClusterSpec, console: Console, extra_env: dict[str, str] | None = None) -> None:
        super().__init__("sql", spec.sql_url, spec.sql_server_args(), spec.data_dir, spec.data_dir / "sql.log",
                         console, extra_env)
        self.port = spec.sql_port

    def is_ready(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=READY_PROBE_TIMEOUT_S):
                return True
        except OSError:
            return False
