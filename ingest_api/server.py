"""Run one ingest node: open its logs, serve HTTP with uvicorn, stop cleanly on SIGTERM / Ctrl-C."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import uvicorn

from lakelog.infra.config import ConfigError
from lakelog.infra.logs import JsonLogFormatter, RepeatFilter
from lakelog.ingest_api.http.app import create_app
from lakelog.ingest_api.http.body_buffering import whole_body_protocol
from lakelog.ingest_api.http.metrics import NodeMetrics
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.config.kafka import check_listener_security
from lakelog.ingest_api.kafka.door import KafkaDoor
from lakelog.ingest_api.node import Node
from lakelog.ingest_api.security import tls as tls_settings
from lakelog.ingest_api.security.cluster_secret import resolve_cluster_secret
from lakelog.ingest_api.http.connections import guarded_http_protocol
from lakelog.logstore.open_files import (
    FILES_PER_SEGMENT,
    RESERVED_FILES,
    check_hard_limit,
    files_needed,
    lift_soft_limit,
    segments_on_disk,
)


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr; one message repeated past a burst is rate-limited (infra/logs.py)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per internal request (Raft heartbeats, replica fetches) would drown the node's own log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


def raise_open_file_limit(config: NodeConfig) -> None:
    """Lift the soft open-file limit to the hard one (every segment keeps files open) and refuse to
    start when the hard limit cannot hold the segments on disk (logstore/open_files.py)."""
    log = logging.getLogger("lakelog.node")
    limit = lift_soft_limit()
    partitions, segments = segments_on_disk(config.data_dir)
    needed = files_needed(segments)
    log.info("open-file limit: soft %s (was %s), hard %s; %d partitions with %d segments on disk need about %d "
             "(%d per segment + %d), and each connection one more", limit.soft, limit.soft_before, limit.hard,
             partitions, segments, needed, FILES_PER_SEGMENT, RESERVED_FILES)
    try:
        check_hard_limit(limit, config.data_dir, segments, partitions)
    except ConfigError as e:
        log.error("refusing to start: %s", e)
        raise
    if limit.soft is not None and limit.soft < needed + 2 * config.max_connections:
        log.warning("open-file limit %d leaves less than 2 x max.connections (%d) for connections once the %d "
                    "segments on disk are open", limit.soft, config.max_connections, segments)


def exit_zero_on_sigterm() -> None:
    """Make SIGTERM end the node with status 0, after it has closed its logs.

    uvicorn handles SIGTERM itself (graceful shutdown) and then re-raises it with the previous
    handler restored. With the default action that re-raise would kill the process before
    `run_node`'s `finally: node.stop()` writes the clean-shutdown markers; this handler turns it
    into SystemExit, which unwinds through that `finally`. Later SIGTERMs are ignored so they
    cannot cut the stop short.
    """

    def _handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _handler)


class NodeServer(uvicorn.Server):
    """uvicorn, with a controlled shutdown before it stops serving.

    The first SIGTERM / Ctrl-C asks the controller to move this node's leaderships away while the
    node still answers (it may be the Raft leader that must commit that move), then lets uvicorn
    shut down; a second signal stops at once.
    """

    def __init__(self, config: uvicorn.Config, node: Node, metrics: NodeMetrics) -> None:
        super().__init__(config)
        self.node = node
        self.metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False
        self.kafka: KafkaDoor | None = None

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.started and self.node.config.kafka_listeners:
            self.kafka = KafkaDoor(self.node, self.node.groups)
            try:
                await self.kafka.start()
            except OSError as e:  # as uvicorn does for its own port: say so, shut the application down, exit 1
                logging.getLogger("lakelog.kafka").error("cannot open the Kafka listeners: %s", e)
                await self.kafka.stop()
                await self.lifespan.shutdown()
                sys.exit(1)
            door = self.kafka
            self.metrics.kafka_connections.set_function(lambda: door.connection_count)

    async def shutdown(self, sockets=None) -> None:
        if self.kafka is not None:
            await self.kafka.stop()
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        if self._draining or self._loop is None or not self.started:
            super().handle_exit(sig, frame)
            return
        self._draining = True
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain(sig, frame)))

    async def _drain(self, sig: int, frame) -> None:
        try:
            await asyncio.wait_for(self.node.controlled_shutdown(),
                                   self.node.config.controlled_shutdown_timeout_ms / 1000 + 1)
        except asyncio.TimeoutError:
            logging.getLogger("lakelog.node").warning("controlled shutdown did not finish in %d ms; stopping anyway",
                                                      self.node.config.controlled_shutdown_timeout_ms)
        except Exception:
            logging.getLogger("lakelog.node").exception("controlled shutdown failed")
        finally:
            super().handle_exit(sig, frame)


def run_node(config: NodeConfig) -> int:
    configure_logging()
    raise_open_file_limit(config)
    exit_zero_on_sigterm()
    tls = tls_settings.uvicorn_kwargs(config)  # raises ConfigError before anything starts
    check_listener_security(config.kafka_listeners, config.authentication_enabled, tls_settings.enabled(config))
    # Slow headers close the connection; too many header bytes are answered 431 as they arrive.
    # max.connections is counted as connections are accepted (connections.py): a connection over it is
    # answered 503 and closed while the others keep being served.
    guarded = guarded_http_protocol(config.request_header_timeout_ms / 1000, config.max_header_bytes,
                                    config.max_connections)
    if guarded is not None:
        # A declared body reaches the routers in one piece, not in 64 KiB steps (body_buffering.py).
        tls["http"] = whole_body_protocol(guarded, config.max_request_bytes)
    config = resolve_cluster_secret(config)  # refuses a missing or published secret before anything starts
    logging.getLogger("lakelog.node").info("startup phase: process up (its modules imported)")
    node = Node(config)
    node.start()
    app = create_app(node)
    logging.getLogger("lakelog.node").info("startup phase: node and app built")
    server = NodeServer(uvicorn.Config(app, host=config.host, port=config.port, log_config=None,
                                       access_log=False, timeout_graceful_shutdown=5,
                                       limit_concurrency=None if guarded is not None else config.max_connections,
                                       timeout_keep_alive=30,
                                       h11_max_incomplete_event_size=config.max_header_bytes, **tls), node,
                          app.state.metrics)
    try:
        server.run()
    finally:
        node.stop()
        if node.abandoned_threads:
            # Threads blocked on a hung dependency would hold the interpreter's exit (it joins
            # every worker thread): the logs are closed, so end the process now.
            logging.shutdown()
            os._exit(0)
    return 0
