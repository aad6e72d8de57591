"""Confluent REST Proxy v3: the dynamic replication throttle rates, Lakelog's only dynamic broker configs.

`leader.replication.throttled.rate` and `follower.replication.throttled.rate` (bytes/s; see
`ingest_api/cluster/throttles.py`) are dynamic broker configs, as in Kafka: set for one broker or as
the cluster-wide default, stored in the metadata log with the other dynamic broker configs
(ingest_api/cluster/broker_configs.py, op `alter_dynamic_broker_configs`).

  GET/PUT/DELETE /v3/clusters/{c}/broker-configs/{key}          the cluster-wide default
  GET/PUT/DELETE /v3/clusters/{c}/brokers/{b}/configs/{key}     one broker's value

Bodies and answers as Confluent's config endpoints (`{"value": "1048576"}`, 204; a
`KafkaClusterConfig` / `KafkaBrokerConfig` with `source` DYNAMIC_DEFAULT_BROKER_CONFIG /
DYNAMIC_BROKER_CONFIG; 404 when unset). Routes name the two keys literally and are registered before
`configs_v3.py`, whose `{name}` routes answer every other (static) broker config.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.ingest_api.cluster.throttles import CLUSTER_DEFAULT, RATE_KEYS, check_rate
from lakelog.ingest_api.errors import BrokerNotFoundError, ConfigNotFoundError, InvalidRequestError
from lakelog.ingest_api.http.routers.v3_resources import base_url, cluster_node, resource_meta

router = APIRouter(prefix="/v3", tags=["configs v3"])


class RateRequest(BaseModel):
    value: str = Field(max_length=32)


def _body(request: Request, cluster_id: str, broker_id: int, key: str, value: int) -> dict[str, Any]:
    if broker_id == CLUSTER_DEFAULT:
        url = f"{base_url(request)}/clusters/{cluster_id}/broker-configs/{key}"
        kind, source, crn = "KafkaClusterConfig", "DYNAMIC_DEFAULT_BROKER_CONFIG", f"crn:///kafka={cluster_id}/broker-config={key}"
        extra: dict[str, Any] = {"config_type": "BROKER"}
    else:
        url = f"{base_url(request)}/clusters/{cluster_id}/brokers/{broker_id}/configs/{key}"
        kind, source, crn = "KafkaBrokerConfig", "DYNAMIC_BROKER_CONFIG", f"crn:///kafka={cluster_id}/broker={broker_id}/config={key}"
        extra = {"broker_id": broker_id}
    return {"kind": kind, "metadata": resource_meta(url, crn), "cluster_id": cluster_id, **extra, "name": key,
            "value": str(value), "is_default": False, "is_read_only": False, "is_sensitive": False,
            "source": source, "synonyms": [{"name": key, "value": str(value), "source": source}]}


def _check(node: Any, broker_id: int) -> None:
    node.admin.check_ready()
    if broker_id != CLUSTER_DEFAULT and broker_id not in node.image.brokers:
        raise BrokerNotFoundError(f"Broker {broker_id} cannot be found.")


async def _set(node: Any, broker_id: int, key: str, value: str | None) -> None:
    if value is not None:
        try:
            check_rate(key, value)
        except ValueError as e:
            raise InvalidRequestError(str(e)) from None
    change = {"set": {key: value}} if value is not None else {"delete": [key]}
    await node.admin.submit("alter_dynamic_broker_configs", {"broker": broker_id, **change})


def _get(request: Request, node: Any, cluster_id: str, broker_id: int, key: str) -> JSONResponse:
    _check(node, broker_id)
    own = node.image.broker_configs.of(broker_id)
    if key not in own:
        raise ConfigNotFoundError(f"Config {key} cannot be found (not set dynamically).")
    return JSONResponse(_body(request, cluster_id, broker_id, key, own[key]))


def _add_routes(key: str) -> None:
    @router.get(f"/clusters/{{cluster_id}}/broker-configs/{key}", summary=f"Get the cluster-wide {key}",
                name=f"get_cluster_{key}")
    async def get_default(cluster_id: str, request: Request):
        return _get(request, cluster_node(request, cluster_id), cluster_id, CLUSTER_DEFAULT, key)

    @router.put(f"/clusters/{{cluster_id}}/broker-configs/{key}", status_code=204,
                summary=f"Set the cluster-wide {key} (bytes/s)", name=f"set_cluster_{key}")
    async def set_default(cluster_id: str, body: RateRequest, request: Request):
        node = cluster_node(request, cluster_id)
        _check(node, CLUSTER_DEFAULT)
        await _set(node, CLUSTER_DEFAULT, key, body.value)
        return Response(status_code=204)

    @router.delete(f"/clusters/{{cluster_id}}/broker-configs/{key}", status_code=204,
                   summary=f"Remove the cluster-wide {key}", name=f"delete_cluster_{key}")
    async def delete_default(cluster_id: str, request: Request):
        node = cluster_node(request, cluster_id)
        _check(node, CLUSTER_DEFAULT)
        await _set(node, CLUSTER_DEFAULT, key, None)
        return Response(status_code=204)

    @router.get(f"/clusters/{{cluster_id}}/brokers/{{broker_id}}/configs/{key}", summary=f"Get a broker's {key}",
                name=f"get_broker_{key}")
    async def get_broker(cluster_id: str, broker_id: int, request: Request):
        return _get(request, cluster_node(request, cluster_id), cluster_id, broker_id, key)

    @router.put(f"/clusters/{{cluster_id}}/brokers/{{broker_id}}/configs/{key}", status_code=204,
                summary=f"Set a broker's {key} (bytes/s)", name=f"set_broker_{key}")
    async def set_broker(cluster_id: str, broker_id: int, body: RateRequest, request: Request):
        node = cluster_node(request, cluster_id)
        _check(node, broker_id)
        await _set(node, broker_id, key, body.value)
        return Response(status_code=204)

    @router.delete(f"/clusters/{{cluster_id}}/brokers/{{broker_id}}/configs/{key}", status_code=204,
                   summary=f"Remove a broker's {key}", name=f"delete_broker_{key}")
    async def delete_broker(cluster_id: str, broker_id: int, request: Request):
        node = cluster_node(request, cluster_id)
        _check(node, broker_id)
        await _set(node, broker_id, key, None)
        return Response(status_code=204)


for _key in RATE_KEYS:
    _add_routes(_key)
