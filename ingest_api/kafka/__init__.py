"""Kafka's wire protocol: the node's second front door, on the same core as HTTP (docs/kafka-protocol.md).

  * `config`    — the listener keys (`listener.security.protocol.map`, `socket.request.max.bytes`, ...)
                  and the parsing of Kafka listeners out of `listeners`.
  * `versions`  — the one table of APIs and version ranges answered (ApiVersions reads it).
  * `codec`     — frames and headers; kio entities <-> plain values.
  * `server`    — the asyncio listeners: connections, frames, answers in request order, limits.
  * `door`      — the handler table; `KafkaDoor` is what the node's server starts and stops.
  * `context`, `metadata_apis`, `records_apis`, `group_apis`, `admin_apis` — the handlers, which
                  call the node's core services (never the HTTP routers).
  * `error_codes` — error class / kind -> Kafka error code (folds into the error table).
"""
