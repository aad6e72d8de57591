"""A real `lakelog sql-server` process for tests and benchmarks: started on ports the system picks
(`sc://127.0.0.1:0`, and `http://127.0.0.1:0` with a token file), its stderr collected, stopped
with SIGTERM (then killed if it does not stop)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

LAKELOG = str(Path(sys.executable).with_name("lakelog"))
READY_TIMEOUT_S = 300.0  # a JVM start on a busy machine


class SqlServer:
    def __init__(self, proc: subprocess.Popen, token_file: Path | None) -> None:
        self.proc = proc
        self.token_file = token_file
        self.lines: list[str] = []
        self.address = ""
        self.http_url = ""
        threading.Thread(target=lambda: self.lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()

    @property
    def token(self) -> str | None:
        return self.token_file.read_text().strip() if self.token_file else None

    def output(self) -> str:
        return "".join(self.lines)

    def wait_until(self, text: str, timeout_s: float = READY_TIMEOUT_S) -> str:
        """The first line of the server's output holding `text` (AssertionError if it stops first)."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = next((ln for ln in list(self.lines) if text in ln), None)
            if line is not None:
                return line
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"the SQL server did not say {text!r}: {''.join(self.lines[-30:])}")
            time.sleep(0.1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def start_sql_server(cwd: Path, env: dict[str, str], *args: str, http: bool = True,
                     wait_for_table: str | None = None, connect_port: int = 0, http_port: int = 0,
                     token_file: Path | None = None, timeout_s: float = READY_TIMEOUT_S) -> SqlServer:
    """`lakelog sql-server --listen sc://127.0.0.1:PORT ARGS...` (port 0: one the system picks); with
    `http`, also its HTTP endpoint with a fresh token in `token_file` (default `cwd/data/sql.token`,
    where `lakelog sql` looks, and the address file `data/sql.http` beside it). Returns once it
    listens (and lists `lakelog.<wait_for_table>`)."""
    extra: list[str] = []
    if http:
        token_file = token_file or Path(cwd, "data", "sql.token")
        token_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
        extra = ["--token-file", str(token_file), "--http-listen", f"http://127.0.0.1:{http_port}"]
    proc = subprocess.Popen([LAKELOG, "sql-server", "--listen", f"sc://127.0.0.1:{connect_port}", *extra, *args],
                            cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    server = SqlServer(proc, token_file if http else None)
    try:
        line = server.wait_until("Spark SQL on sc://", timeout_s)
        server.address = "sc://" + line.split("sc://", 1)[1].split()[0]
        if http:
            server.http_url = server.wait_until("SQL calls and `lakelog sql` on http://").rsplit(" ", 1)[1].strip()
        if wait_for_table is not None:
            server.wait_until(f"lakelog.{wait_for_table}", timeout_s)
    except BaseException:
        server.stop()
        raise
    return server
