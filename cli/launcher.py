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

Modules: the cluster's shape, validated (voters, cluster id and secret, replication defaults,
the remote tier, the children's command lines) is `cli/cluster_spec.py`; the child processes and
their log files `cli/launcher_children.py` (`ChildProcess`: a process and its output, nothing of
restarts); the terminal `cli/launcher_console.py`; this module starts them in order and supervises
them (`LocalCluster`, holding a `RestartState` per child: its pending restart, backoff and count).
"""

from __future__ import annotations

import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO

import httpx

from lakelog.cli.cluster_spec import (ClusterSpec, LauncherConfigError, load_or_create_cluster_properties,
                                      load_or_create_sql_token, port_in_use)
from lakelog.cli.launcher_children import (Backoff, ChildProcess, NodeChild, SchedulerChild, SqlServerChild,
                                           describe_exit)
from lakelog.cli.launcher_console import Console
from lakelog.cli.sql_service import SqlServiceError, service_environment

READY_TIMEOUT_S = 60.0
#: A node's own clean stop is bounded by shutdown.timeout.ms (10 s) plus uvicorn's 5 s grace.
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.1


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


class RestartState:
    """The supervisor's record of one child: the restart it waits for, how many it has had, and
    whether a child started after the others or restarted has yet to answer its readiness probe."""

    def __init__(self, *, coming_back: bool = False) -> None:
        self.backoff = Backoff()
        #: While the child is down: the monotonic time of its restart.
        self.restart_at: float | None = None
        self.restarts = 0
        #: After a (re)start: not yet ready.
        self.coming_back = coming_back

    @property
    def pending(self) -> bool:
        """The child is down and waits for its restart."""
        return self.restart_at is not None

    def schedule(self, now: float, ran_s: float) -> float:
        """The child died after running `ran_s` seconds: its restart is due after the returned delay."""
        delay = self.backoff.after_run(ran_s)
        self.restart_at = now + delay
        return delay

    def due(self, now: float) -> bool:
        return self.restart_at is not None and now >= self.restart_at

    def restarted(self) -> None:
        self.restart_at = None
        self.restarts += 1
        self.coming_back = True

    def cancel(self) -> None:
        """No restart (the launcher is stopping)."""
        self.restart_at = None


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
        self.children: list[ChildProcess] = []
        self._restarts: dict[ChildProcess, RestartState] = {}
        self._stop = threading.Event()
        self._stop_signal: str | None = None
        self._stopping = False

    def _say(self, text: str) -> None:
        self.console.say(text)

    def _add(self, child: ChildProcess, *, coming_back: bool = False) -> None:
        """Supervise `child`; `coming_back`: announce it once it is ready."""
        self.children.append(child)
        self._restarts[child] = RestartState(coming_back=coming_back)

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
            if port_in_use(spec.node_port(i)):
                raise LauncherConfigError(f"port {spec.node_port(i)} (node {i}) is already in use; "
                                          "choose another --http-port")
            kafka = spec.node_kafka_port(i)
            if kafka is not None and port_in_use(kafka):
                raise LauncherConfigError(f"port {kafka} (node {i}'s Kafka listener) is already in use; "
                                          "choose another --kafka-port")
        sql_ports = (spec.sql_port, spec.sql_port + 1) if spec.sql_port is not None else ()
        for port in sql_ports + ((spec.sql_thrift_port,) if spec.sql_thrift_port is not None else ()):
            if port_in_use(port):
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
            self._add(child)
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
            self._add(scheduler)
            scheduler.start()
            self._say(f"  jobs: {', '.join(f'{j} every {s:g}s' for j, s in spec.jobs_every.items() if s)} "
                      f"(pid {scheduler.proc.pid}; Spark in local mode)")
        if spec.sql_port is not None and not spec.added_nodes:
            load_or_create_sql_token(spec.sql_token_path)
            try:  # with authentication on, a service user of its own to read the nodes (cli/sql_service.py)
                sql_env = service_environment(spec.node_url(1), spec.data_dir,
                                              load_or_create_cluster_properties(spec.data_dir)[1])
            except (SqlServiceError, httpx.HTTPError) as e:
                self._say(f"lakelog up: cannot give the SQL server credentials of its own ({e}); stopping")
                return self._finish(1)
            sql = SqlServerChild(spec, self.console, sql_env)
            self._add(sql, coming_back=True)  # announced when its port answers (its JVM takes a few seconds)
            sql.start()
            self._say(f"  sql: {sql.url} (pid {sql.proc.pid}, log {sql.log_path.name}; Spark Connect, starting; "
                      f"`lakelog sql` uses it)")
        self._say("")
        self._say(f"lakelog up: ready. Try: {command_hint()} topics create demo --bootstrap-server {spec.node_url(1)}")
        self._say(f"Web console: {spec.node_url(1)}/ (in a browser; any node serves it)")
        if spec.bootstrap_servers:
            self._say(f"Kafka clients: bootstrap.servers={spec.bootstrap_servers}")
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

    def _supervise(self, child: ChildProcess) -> int | None:
        """One look at a child: report and schedule a death, restart when due, announce a comeback.

        Returns 1 when `exit_on_death` ends the run.
        """
        now = time.monotonic()
        state = self._restarts[child]
        if not state.pending and child.poll() is not None:
            if self.exit_on_death:
                return self._report_exit(child)
            child.join_output()
            delay = state.schedule(now, now - child.started_at)
            words = child.last_words() if child.proc.returncode > 0 else ""
            self._say(f"lakelog up: {child.name} (pid {child.proc.pid}) {describe_exit(child.proc.returncode)}"
                      + (f" ({words[:200]})" if words else "")
                      + f"; restarting it in {delay:g} s, with its data")
        elif state.due(now):
            state.restarted()
            child.start()
        elif state.coming_back and child.poll() is None and child.is_ready():
            state.coming_back = False
            if state.restarts == 0:  # a child started after the nodes (the SQL server): ready now
                self._say(f"lakelog up: {child.name} is ready on {child.url} (pid {child.proc.pid})")
            else:
                self._say(f"lakelog up: {child.name} is back (pid {child.proc.pid}, restart {state.restarts})")
        return None

    def _exited_child(self) -> ChildProcess | None:
        return next((c for c in self.children if not self._restarts[c].pending and c.poll() is not None), None)

    def _report_exit(self, child: ChildProcess) -> int:
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
        for state in self._restarts.values():
            state.cancel()  # no restart during the stop
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
