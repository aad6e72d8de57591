"""Moto's S3 server as a subprocess on a free loopback port, for tests and benchmarks.

    with S3Server() as s3:                      # started; stopped (SIGTERM, then SIGKILL) on exit
        s3.create_bucket("lakelog-test")
        env = s3.env()                          # AWS_ENDPOINT_URL, fake credentials, AWS_REGION
        ...
        s3.pause()                              # outage: the port refuses connections, objects are kept
        s3.resume()                             # back on the same port with the same objects
        s3.freeze()                             # hang: SIGSTOP (connections accepted, never answered)
        s3.thaw()                               # SIGCONT: queued requests are answered
        s3.requests()                           # {"GET": 3, "HEAD": 1, ...} since the last call
                                                # (+ "bytes GET .log": bytes the Range headers asked)

moto's console script `moto_server` is `moto.server:main`: it serves moto's WSGI app
(`moto.moto_server.werkzeug_app.DomainDispatcherApplication`) with werkzeug and keeps every object
in the process's memory, so restarting it loses the bucket. To simulate an outage that the store
survives, the child here (`python -m infra.s3server --serve`) serves that same app itself and obeys
commands on stdin: `pause` closes the listening socket (clients get "connection refused"),
`resume` listens again on the same port, `requests` answers the count of requests by HTTP method
since the last `requests` (one JSON line; what tests use to check how many HEADs and GETs a reader
sends, and, as `bytes GET .log`, how many bytes the ranged GETs of each object suffix asked for), `stop` (or EOF: the parent died) exits. `plain=True` runs
the `moto_server` script instead (no pause/resume).

The free port is chosen by the child binding port 0, so two test runs never race for a port
(except on `resume`, which re-binds the same port; SO_REUSEADDR is set).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

DEFAULT_REGION = "us-east-1"
START_TIMEOUT_S = 30.0


class S3Server:
    """A moto S3 server subprocess on 127.0.0.1."""

    def __init__(self, *, host: str = "127.0.0.1", plain: bool = False,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.host = host
        self.plain = plain
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self.paused = False
        self.frozen = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the S3 server is not started")
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for boto3 / the S3 store: endpoint, fake credentials, region."""
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": DEFAULT_REGION,
                "AWS_DEFAULT_REGION": DEFAULT_REGION}

    def start(self) -> "S3Server":
        if self._proc is not None:
            raise RuntimeError("the S3 server is already started")
        if self.plain:
            self._start_plain()
        else:
            self._start_controlled()
        return self

    def _start_controlled(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.s3server", "--serve", "--host", self.host],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        threading.Thread(target=self._pump, args=(self._proc.stdout,), daemon=True).start()
        line = self._expect("listening", self.start_timeout_s)
        self.port = int(line.split()[1])

    def _start_plain(self) -> None:
        script = shutil.which("moto_server") or os.path.join(os.path.dirname(sys.executable), "moto_server")
        with socket.socket() as s:
            s.bind((self.host, 0))
            port = s.getsockname()[1]
        self._proc = subprocess.Popen([script, "-H", self.host, "-p", str(port)], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = port
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).close()
                return
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)

    def _pump(self, stream) -> None:
        for line in stream:
            self._lines.put(line.strip())
        self._lines.put("eof")

    def _expect(self, word: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError(f"the S3 server did not answer {word!r} within {timeout_s} s") from None
            if line.startswith(word):
                return line
            if line == "eof" or line.startswith("error"):
                self.stop()
                raise RuntimeError(f"the S3 server failed: {line}")

    def _command(self, command: str, answer: str) -> None:
        if self.plain or self._proc is None or self._proc.stdin is None:
            raise RuntimeError("pause/resume need a started, non-plain S3 server")
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        self._expect(answer, self.start_timeout_s)

    def pause(self) -> None:
        """Stop listening (connections are refused); the objects stay in the server."""
        self._command("pause", "paused")
        self.paused = True

    def resume(self) -> None:
        """Listen again on the same port."""
        self._command("resume", "listening")
        self.paused = False

    def freeze(self) -> None:
        """SIGSTOP the server: the kernel still accepts connections, nothing answers (a hung store)."""
        if self._proc is None:
            raise RuntimeError("the S3 server is not started")
        os.kill(self._proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        """SIGCONT the server (idempotent)."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)
        self.frozen = False

    def requests(self) -> dict[str, int]:
        """The requests the server answered since the last call (or its start), by HTTP method,
        and by method and object-key suffix (`"GET .log"`), and the bytes the ranged ones asked
        for (`"bytes GET .log"`, from their `Range: bytes=a-b`); the counts start again at zero."""
        if self.plain or self._proc is None or self._proc.stdin is None:
            raise RuntimeError("request counts need a started, non-plain S3 server")
        self._proc.stdin.write("requests\n")
        self._proc.stdin.flush()
        return json.loads(self._expect("requests", self.start_timeout_s)[len("requests"):])

    def stop(self) -> None:
        """Stop the server: ask, then SIGTERM, then SIGKILL. Idempotent."""
        if self.frozen:
            self.thaw()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None and proc.poll() is None:
                try:
                    proc.stdin.write("stop\n")
                    proc.stdin.flush()
                    proc.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ conveniences

    def create_bucket(self, name: str) -> None:
        """Create a bucket (through the S3 store: only the object-store seam imports boto3)."""
        from lakelog.tiering.s3_store import S3Store

        env = self.env()
        store = S3Store(name, endpoint_url=self.endpoint_url, region=DEFAULT_REGION,
                        access_key_id=env["AWS_ACCESS_KEY_ID"], secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        try:
            store.ensure_bucket()
        finally:
            store.close()


# ---------------------------------------------------------------------------------------------
# the child process


def _range_bytes(header: str) -> int | None:
    """The bytes a `Range: bytes=a-b` header asks for (b - a + 1); None without a closed range."""
    if not header.startswith("bytes="):
        return None
    first, _, last = header[len("bytes="):].partition("-")
    if not first.isdigit() or not last.isdigit():
        return None
    return int(last) - int(first) + 1


def _serve(host: str) -> int:
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto_app = DomainDispatcherApplication(create_backend_app)
    state: dict = {"server": None, "thread": None, "port": 0}
    counts: collections.Counter = collections.Counter()
    counts_lock = threading.Lock()

    def app(environ, start_response):
        method = environ.get("REQUEST_METHOD", "?")
        name = environ.get("PATH_INFO", "").rsplit("/", 1)[-1]
        suffix = name[name.rfind("."):] if "." in name else ""
        asked = _range_bytes(environ.get("HTTP_RANGE", ""))
        with counts_lock:
            counts[method] += 1
            if suffix:
                counts[f"{method} {suffix}"] += 1
                if asked is not None:
                    counts[f"bytes {method} {suffix}"] += asked
        return moto_app(environ, start_response)

    def listen() -> None:
        server = make_server(host, state["port"], app, threaded=True, request_handler=MotoRequestHandler)
        state["port"] = server.server_address[1]
        os.environ["MOTO_PORT"] = str(state["port"])
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        state["server"], state["thread"] = server, thread
        print(f"listening {state['port']}", flush=True)

    def close() -> None:
        server = state["server"]
        if server is not None:
            server.shutdown()
            server.server_close()
            state["thread"].join(timeout=5)
            state["server"] = None

    try:
        listen()
    except OSError as e:
        print(f"error {e}", flush=True)
        return 1
    for line in sys.stdin:
        command = line.strip()
        if command == "pause":
            close()
            print("paused", flush=True)
        elif command == "resume":
            for _ in range(100):  # the old socket may linger for a moment
                try:
                    listen()
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                print("error cannot listen again", flush=True)
        elif command == "requests":
            with counts_lock:
                answer = dict(counts)
                counts.clear()
            print("requests " + json.dumps(answer, sort_keys=True), flush=True)
        elif command == "stop":
            break
    close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="moto's S3 server for tests (see tests/support/s3server.py)")
    parser.add_argument("--serve", action="store_true", help="run as the controlled child process")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    if args.serve:
        return _serve(args.host)
    with S3Server(host=args.host) as s3:
        print(f"moto S3 server on {s3.endpoint_url}; Ctrl-C stops it", flush=True)
        for k, v in s3.env().items():
            print(f"export {k}={v}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
