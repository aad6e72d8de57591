"""The Kafka door of a node: its listeners (server.py) and the table of API handlers.

`KafkaDoor(node, groups)` is built, started and stopped by the node's server on the node's event
loop (ingest_api/server.py), after the group coordinator has started and before the node stops.
Each handler is a function of the door's `KafkaContext`; it returns a plain dict which becomes the
response type of the request's version (codec.to_entity), or None for no answer (acks=0).
`handle` applies the principal's quotas around each handler (throttle.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from lakelog.ingest_api.kafka import admin_apis, group_apis, metadata_apis, records_apis, sasl_apis, throttle
from lakelog.ingest_api.kafka import log_admin_apis
from lakelog.ingest_api.kafka import acl_apis, quota_apis, scram_admin_apis
from lakelog.ingest_api.kafka import txn_apis
from lakelog.ingest_api.kafka.codec import Request, response_class, to_entity
from lakelog.ingest_api.kafka.context import KafkaContext
from lakelog.ingest_api.kafka.fetch_sessions import FetchSessionCache
from lakelog.ingest_api.kafka.server import Connection, KafkaServer
from lakelog.ingest_api.kafka.versions import SUPPORTED
from lakelog.ingest_api.security import tls

ApiHandler = Callable[[KafkaContext, Request, Connection], Awaitable[dict[str, Any] | None]]

HANDLERS: dict[int, ApiHandler] = {
    0: records_apis.produce,
    1: records_apis.fetch,
    2: records_apis.list_offsets,
    3: metadata_apis.metadata,
    8: group_apis.offset_commit,
    9: group_apis.offset_fetch,
    10: metadata_apis.find_coordinator,
    11: group_apis.join_group,
    12: group_apis.heartbeat,
    13: group_apis.leave_group,
    14: group_apis.sync_group,
    15: group_apis.describe_groups,
    16: group_apis.list_groups,
    17: sasl_apis.sasl_handshake,
    18: metadata_apis.api_versions,
    19: admin_apis.create_topics,
    20: admin_apis.delete_topics,
    21: log_admin_apis.delete_records,
    22: metadata_apis.init_producer_id,
    23: records_apis.offset_for_leader_epoch,
    29: acl_apis.describe_acls,
    30: acl_apis.create_acls,
    31: acl_apis.delete_acls,
    24: txn_apis.add_partitions_to_txn,
    25: txn_apis.add_offsets_to_txn,
    26: txn_apis.end_txn,
    27: txn_apis.write_txn_markers,
    28: txn_apis.txn_offset_commit,
    32: admin_apis.describe_configs,
    33: admin_apis.alter_configs,
    35: log_admin_apis.describe_log_dirs,
    36: sasl_apis.sasl_authenticate,
    37: admin_apis.create_partitions,
    42: group_apis.delete_groups,
    43: log_admin_apis.elect_leaders,
    44: admin_apis.incremental_alter_configs,
    45: log_admin_apis.alter_partition_reassignments,
    46: log_admin_apis.list_partition_reassignments,
    47: log_admin_apis.offset_delete,
    48: quota_apis.describe_client_quotas,
    49: quota_apis.alter_client_quotas,
    50: scram_admin_apis.describe_user_scram_credentials,
    51: scram_admin_apis.alter_user_scram_credentials,
    60: metadata_apis.describe_cluster,
    61: txn_apis.describe_producers,
    65: txn_apis.describe_transactions,
    66: txn_apis.list_transactions,
}

if set(HANDLERS) != set(SUPPORTED):
    raise AssertionError(f"handlers and versions.SUPPORTED differ: {sorted(set(HANDLERS) ^ set(SUPPORTED))}")


class KafkaDoor:
    """The node's Kafka listeners and what answers them."""

    def __init__(self, node: Any, groups: Any) -> None:
        cfg = node.config
        sessions = FetchSessionCache(cfg.max_incremental_fetch_session_cache_slots,
                                     cfg.min_incremental_fetch_session_eviction_ms,
                                     lambda: int(time.monotonic() * 1000))
        self.context = KafkaContext(node, groups, sessions)
        self.server = KafkaServer(cfg.kafka_listeners, self.handle, metadata_apis.api_versions_table,
                                  max_frame_bytes=cfg.socket_request_max_bytes, max_connections=cfg.max_connections,
                                  idle_timeout_ms=cfg.connections_max_idle_ms,
                                  max_in_flight=cfg.queued_max_requests_per_connection,
                                  ssl_context=tls.server_context(cfg))

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    @property
    def connection_count(self) -> int:
        """Open connections of all the door's listeners (read on the node's event loop or a scrape)."""
        return self.server.connection_count

    async def handle(self, req: Request, conn: Connection) -> Any:
        security = self.context.node.security
        principal = conn.principal
        throttle_ms = throttle.admit(security, principal, req)
        doc = await HANDLERS[req.api_key](self.context, req, conn)
        throttle.charge(security, principal, req, doc)
        if doc is None:
            return None
        if throttle_ms > 0:
            doc["throttle_time"] = throttle_ms
            await asyncio.sleep(throttle_ms / 1000)  # the connection's later answers wait too: it is muted
        return to_entity(response_class(req.api_key, req.api_version), doc)
