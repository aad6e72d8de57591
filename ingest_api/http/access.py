"""What each HTTP route requires: the resource and operation an authorized caller needs (pure).

One table covers every route the node serves. `tests/unit/test_security.py` checks that each
operation of the OpenAPI document has a rule here, so no endpoint can be added without one. A path
no rule matches is refused under the authorizer (403), so a forgotten route fails closed.

Rules name the resource from a path parameter (`{topic}`, `{group}`) or the cluster. A few
requirements depend on the body (the topic a create names, the topics a consumer subscribes or is
assigned to); the router checks those with `ingest_api.http.security_middleware.authorize` once it has
parsed the body. The quota a request draws on follows from its rule: produce (WRITE on a topic's
records path) draws on the produce byte rate, a record fetch on the consumer byte rate, and every
request on the request rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (Operation.READ, Operation.WRITE, Operation.CREATE,
                                                Operation.DELETE, Operation.ALTER, Operation.DESCRIBE)
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
SUBJECT = ResourceType.SUBJECT
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

#: Paths anyone may call, authenticated or not (load balancers, orchestrators).
PUBLIC = frozenset({("GET", "/healthz"), ("GET", "/readyz"), ("HEAD", "/healthz"), ("HEAD", "/readyz")})

#: (method, path template, resource type, path parameter naming it (None = the cluster), operation, kind)
#: kind: "produce", "fetch", "body" (the router checks more from the body), "" otherwise.
RULES: list[tuple[str, str, ResourceType | None, str | None, Operation | None, str]] = [
    # First: "-" (every topic / broker) must not be read as a topic or broker named "-".
    ("GET", "/v3/clusters/{cluster_id}/brokers/-/configs", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/-/configs", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/topics/-/configs:alter", CLUSTER, None, ALTER, ""),  # and ALTER per topic
    ("GET", "/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment:alter", CLUSTER, None, ALTER, ""),
    ("POST", "/v3/clusters/{cluster_id}/topics/-/partitions/-/preferred-leader:elect", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/-/reassignment", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/reassignment", CLUSTER, None,
     DESCRIBE, ""),
    ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/reassignment", CLUSTER, None,
     ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/reassignment", CLUSTER, None,
     ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/brokers/{broker_id}", CLUSTER, None, ALTER, ""),
    ("GET", "/metrics", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/openapi.json", None, None, None, ""),  # authenticated only
    ("GET", "/docs", None, None, None, ""),
    ("GET", "/docs/assets/{name}", None, None, None, ""),
    ("GET", "/redoc", None, None, None, ""),
    ("GET", "/topics", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/topics/{topic}", TOPIC, "topic", DESCRIBE, ""),
    ("POST", "/topics/{topic}", TOPIC, "topic", WRITE, "produce"),
    ("GET", "/topics/{topic}/partitions", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/topics/{topic}/partitions/{partition}", TOPIC, "topic", DESCRIBE, ""),
    ("POST", "/topics/{topic}/partitions/{partition}", TOPIC, "topic", WRITE, "produce"),
    ("GET", "/topics/{topic}/partitions/{partition}/records", TOPIC, "topic", READ, "fetch"),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/brokers", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/producers", CLUSTER, None, WRITE, ""),
    # Transactions (routers/transactions_v3.py), as Kafka authorizes its transaction APIs: WRITE on the
    # TransactionalId (DESCRIBE to read it); the router checks the id a body or `{id}:commit` names,
    # and sending offsets also READ on the group and its topics, adding partitions WRITE on the topics.
    ("POST", "/v3/clusters/{cluster_id}/transactions", None, None, None, "body"),
    ("GET", "/v3/clusters/{cluster_id}/transactions/{transactional_id}", TRANSACTIONAL_ID, "transactional_id",
     DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/transactions/{transactional_id}/offsets", TRANSACTIONAL_ID,
     "transactional_id", WRITE, "body"),
    ("POST", "/v3/clusters/{cluster_id}/transactions/{transactional_id}/partitions", TRANSACTIONAL_ID,
     "transactional_id", WRITE, "body"),
    ("POST", "/v3/clusters/{cluster_id}/transactions/{name}", None, None, None, "body"),
    ("GET", "/v3/clusters", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/topics", None, None, None, "body"),  # CREATE: cluster or the topic
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}", TOPIC, "topic", DESCRIBE, ""),
    ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic}", TOPIC, "topic", ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}", TOPIC, "topic", DELETE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", TOPIC, "topic", DESCRIBE, ""),
    ("PUT", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", TOPIC, "topic", ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", TOPIC, "topic", ALTER, ""),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter", TOPIC, "topic", ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/brokers", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/acls", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/acls", CLUSTER, None, ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/acls", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/users", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/users", CLUSTER, None, ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/users/{user}", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/api-keys", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/api-keys", CLUSTER, None, ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/api-keys/{key_id}", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/quotas", CLUSTER, None, DESCRIBE, ""),
    ("PUT", "/v3/clusters/{cluster_id}/quotas/{principal}", CLUSTER, None, ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/quotas/{principal}", CLUSTER, None, ALTER, ""),
    # Confluent v3 produce, consumer groups, configs, replicas, ACL batch; the root.
    ("GET", "/", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/records", TOPIC, "topic", WRITE, "produce"),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/records:batch", TOPIC, "topic", WRITE, "produce"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}", GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/consumers", GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer_id}", GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer_id}/assignments",
     GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer_id}/assignments/{topic}"
     "/partitions/{partition}", GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/lags", GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/lags/{topic}/partitions/{partition}",
     GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{group}/lag-summary", GROUP, "group", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs:alter", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", CLUSTER, None, DESCRIBE, ""),
    ("PUT", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", CLUSTER, None, ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/broker-configs", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/broker-configs:alter", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/broker-configs/{name}", CLUSTER, None, DESCRIBE, ""),
    ("PUT", "/v3/clusters/{cluster_id}/broker-configs/{name}", CLUSTER, None, ALTER, ""),
    ("DELETE", "/v3/clusters/{cluster_id}/broker-configs/{name}", CLUSTER, None, ALTER, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas/{broker_id}",
     TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/offset", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/v3/clusters/{cluster_id}/acls:batch", CLUSTER, None, ALTER, ""),
    ("POST", "/consumers/{group}", GROUP, "group", READ, ""),
    ("DELETE", "/consumers/{group}/instances/{instance}", GROUP, "group", READ, ""),
    ("POST", "/consumers/{group}/instances/{instance}/subscription", GROUP, "group", READ, "body"),
    ("GET", "/consumers/{group}/instances/{instance}/subscription", GROUP, "group", READ, ""),
    ("DELETE", "/consumers/{group}/instances/{instance}/subscription", GROUP, "group", READ, ""),
    ("POST", "/consumers/{group}/instances/{instance}/assignments", GROUP, "group", READ, "body"),
    ("GET", "/consumers/{group}/instances/{instance}/assignments", GROUP, "group", READ, ""),
    ("GET", "/consumers/{group}/instances/{instance}/records", GROUP, "group", READ, "fetch"),
    ("POST", "/consumers/{group}/instances/{instance}/offsets", GROUP, "group", READ, ""),
    ("GET", "/consumers/{group}/instances/{instance}/offsets", GROUP, "group", READ, ""),
    ("POST", "/consumers/{group}/instances/{instance}/positions", GROUP, "group", READ, ""),
    ("POST", "/consumers/{group}/instances/{instance}/positions/beginning", GROUP, "group", READ, ""),
    ("POST", "/consumers/{group}/instances/{instance}/positions/end", GROUP, "group", READ, ""),
    ("GET", "/groups", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/groups/{group}", GROUP, "group", DESCRIBE, ""),
    ("GET", "/groups/{group}/offsets", GROUP, "group", DESCRIBE, ""),
    ("POST", "/groups/{group}/offsets", GROUP, "group", READ, "body"),
    ("GET", "/stats/node", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/stats/cluster", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/stats/topics", CLUSTER, None, DESCRIBE, ""),  # and lists only the topics one may describe
    ("GET", "/stats/topics/{topic}", TOPIC, "topic", DESCRIBE, ""),
    ("GET", "/stats/events", CLUSTER, None, DESCRIBE, ""),  # and a topic's events only to who may describe it
    ("POST", "/stats/decode", None, None, None, "body"),  # per schema id, as GET /schemas/ids/{schema_id}
    ("GET", "/sql/access", None, None, None, "body"),  # about the caller itself; 403 if it may read nothing
    ("GET", "/jobs/runs", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/jobs/runs/{run_id}", CLUSTER, None, DESCRIBE, ""),
    ("POST", "/jobs/runs", CLUSTER, None, ALTER, ""),
    ("POST", "/jobs/runs/{run_id}/cancel", CLUSTER, None, ALTER, ""),
    ("POST", "/console/sql", None, None, None, "body"),  # READ on each topic the query reads (the router)
    # The Schema Registry (ingest_api/http/routers/schemas.py). A read by schema id ("body": the router
    # checks) needs READ on a subject that uses the id (deserializers know no subject), or DESCRIBE
    # on the cluster.
    ("GET", "/schemas/types", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/schemas", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/schemas/ids/{schema_id}", None, None, None, "body"),
    ("GET", "/schemas/ids/{schema_id}/schema", None, None, None, "body"),
    ("GET", "/schemas/ids/{schema_id}/subjects", None, None, None, "body"),
    ("GET", "/schemas/ids/{schema_id}/versions", None, None, None, "body"),
    ("GET", "/subjects", CLUSTER, None, DESCRIBE, ""),
    ("GET", "/subjects/{subject}/versions", SUBJECT, "subject", READ, ""),
    ("POST", "/subjects/{subject}/versions", SUBJECT, "subject", WRITE, ""),
    ("GET", "/subjects/{subject}/versions/{version}", SUBJECT, "subject", READ, ""),
    ("GET", "/subjects/{subject}/versions/{version}/schema", SUBJECT, "subject", READ, ""),
    ("GET", "/subjects/{subject}/versions/{version}/referencedby", SUBJECT, "subject", READ, ""),
    ("DELETE", "/subjects/{subject}/versions/{version}", SUBJECT, "subject", DELETE, ""),
    ("POST", "/subjects/{subject}", SUBJECT, "subject", READ, ""),
    ("DELETE", "/subjects/{subject}", SUBJECT, "subject", DELETE, ""),
    ("POST", "/compatibility/subjects/{subject}/versions", SUBJECT, "subject", READ, ""),
    ("POST", "/compatibility/subjects/{subject}/versions/{version}", SUBJECT, "subject", READ, ""),
    ("GET", "/config", CLUSTER, None, DESCRIBE, ""),
    ("PUT", "/config", CLUSTER, None, ALTER, ""),
    ("DELETE", "/config", CLUSTER, None, ALTER, ""),
    ("GET", "/config/{subject}", SUBJECT, "subject", DESCRIBE, ""),
    ("PUT", "/config/{subject}", SUBJECT, "subject", ALTER, ""),
    ("DELETE", "/config/{subject}", SUBJECT, "subject", ALTER, ""),
    ("GET", "/mode", CLUSTER, None, DESCRIBE, ""),
    ("PUT", "/mode", CLUSTER, None, ALTER, ""),
    ("DELETE", "/mode", CLUSTER, None, ALTER, ""),
    ("GET", "/mode/{subject}", SUBJECT, "subject", DESCRIBE, ""),
    ("PUT", "/mode/{subject}", SUBJECT, "subject", ALTER, ""),
    ("DELETE", "/mode/{subject}", SUBJECT, "subject", ALTER, ""),
]


@dataclass(frozen=True)
class Requirement:
    """What one request needs: (resource type, name, operation) or None (authentication only)."""

    resource_type: ResourceType | None
    resource_name: str
    operation: Operation | None
    kind: str


def _compile(template: str) -> re.Pattern:
    out = "".join(f"(?P<{part[1:-1]}>[^/]+)" if part.startswith("{") else re.escape(part)
                  for part in re.split(r"(\{[a-z_]+\})", template))
    return re.compile(out + r"\Z")


_COMPILED: dict[str, list[tuple[re.Pattern, ResourceType | None, str | None, Operation | None, str]]] = {}
for _m, _t, _rt, _param, _op, _kind in RULES:
    _COMPILED.setdefault(_m, []).append((_compile(_t), _rt, _param, _op, _kind))
    if _m == "GET":
        _COMPILED.setdefault("HEAD", []).append((_compile(_t), _rt, _param, _op, _kind))


_MEMO: dict[tuple[str, str], Requirement | None] = {}
_MEMO_MAX = 10_000


def requirement(method: str, path: str) -> Requirement | None:
    """The requirement of a request, or None when no rule matches (refused under the authorizer)."""
    key = (method, path)
    hit = _MEMO.get(key, _MEMO)
    if hit is not _MEMO:
        return hit  # type: ignore[return-value]
    found = None
    for pattern, rtype, param, op, kind in _COMPILED.get(method, ()):
        m = pattern.match(path)
        if m is not None:
            found = Requirement(rtype, CLUSTER_NAME if param is None else m.group(param), op, kind)
            break
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = found
    return found
