"""What the Confluent REST Proxy v3 routers share: resource URLs and bodies, the cluster check, list
bodies, topic config bodies and validation, the ACL body's schema."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.infra.config import LOG_CONFIG
from lakelog.ingest_api.errors import ClusterNotFoundError, ConfigNotFoundError
from lakelog.ingest_api.http.routers.deps import get_node, get_node_per_partition

#: Largest body of a users, API keys or ACLs request.
MAX_SECURITY_BODY_BYTES = 1 << 20
#: The OpenAPI schema of an ACL binding's body.
ACL_SCHEMA = {"type": "object", "required": ["resource_type", "resource_name", "principal", "operation", "permission"],
              "properties": {k: {"type": "string"} for k in ("resource_type", "resource_name", "pattern_type",
                                                              "principal", "host", "operation", "permission")}}


class AlterConfigEntry(BaseModel):
    """One entry of a `configs:alter` request (SET by default, or DELETE)."""

    name: str = Field(min_length=1, max_length=255)
    value: str | None = Field(default=None, max_length=4096)
    operation: str | None = Field(default=None, pattern="^(SET|DELETE|set|delete)$")


def validate_topic_configs(node: Any, topic: str, set_configs: dict[str, str], delete: list[str]) -> None:
    """Every check an alter would make, changing nothing (validate_only)."""
    t = node.admin.topic(topic)
    for name in [*set_configs, *delete]:
        if name not in LOG_CONFIG.keys:
            raise ConfigNotFoundError(f"Config {name} cannot be found.")
    merged = {k: v for k, v in t.configs.items() if k not in delete}
    merged.update(set_configs)
    node.config.log_config(merged)  # raises on a bad value


def base_url(request: Request) -> str:
    """The v3 API's root URL as the client addressed this node."""
    return str(request.base_url).rstrip("/") + "/v3"


def cluster_node(request: Request, cluster_id: str):
    """The ready node, when `cluster_id` is its cluster; ClusterNotFoundError otherwise."""
    node = get_node(request)
    if cluster_id != node.cluster_id:
        raise ClusterNotFoundError(f"Cluster {cluster_id} not found.")
    return node


def cluster_node_per_partition(request: Request, cluster_id: str):
    """The node, when `cluster_id` is its cluster, for a produce route that checks readiness per
    partition (`Node.leader_of`); ClusterNotFoundError otherwise."""
    node = get_node_per_partition(request)
    if cluster_id != node.cluster_id:
        raise ClusterNotFoundError(f"Cluster {cluster_id} not found.")
    return node


def resource_meta(self_url: str, resource: str) -> dict[str, Any]:
    """A v3 resource's `metadata`: its URL and resource name (CRN)."""
    return {"self": self_url, "resource_name": resource}


def list_body(kind: str, self_url: str, data: list) -> JSONResponse:
    """A v3 list answer (one page: `next` is null)."""
    return JSONResponse({"kind": kind, "metadata": {"self": self_url, "next": None}, "data": data})


def topic_config_body(request: Request, node, topic: str, name: str, value: Any, overrides: dict) -> dict[str, Any]:
    """A `KafkaTopicConfig`: the value in force and whether the topic overrides it."""
    url = f"{base_url(request)}/clusters/{node.cluster_id}/topics/{topic}/configs/{name}"
    is_default = name not in overrides
    return {"kind": "KafkaTopicConfig",
            "metadata": resource_meta(url, f"crn:///kafka={node.cluster_id}/topic={topic}/config={name}"),
            "cluster_id": node.cluster_id, "topic_name": topic, "name": name,
            "value": None if value is None else (str(value).lower() if isinstance(value, bool) else str(value)),
            "is_default": is_default, "is_read_only": False, "is_sensitive": False,
            "source": "DEFAULT_CONFIG" if is_default else "DYNAMIC_TOPIC_CONFIG", "synonyms": []}
