"""A small HTTP client of one ingest node: the calls `AdminClient` (client/admin.py) and the console
tools (`lakelog topics|groups|acls|...`) make.

It speaks the node's public API only: Confluent REST Proxy v3 for topic administration (the
cluster id is read once from `GET /v3/clusters`), binary v2 JSON (`application/vnd.kafka.binary.v2+json`,
keys and values base64) for produce and fetch, and `/topics/{t}/partitions/{p}/offsets`.

Every failure becomes a `ClientError` with a message fit for a terminal: an error answer's
Confluent body `{"error_code", "message"}` is surfaced as is; a node that cannot be reached, or
that answers something that is not JSON, is named with its URL. Every request has a timeout; a
fetch's read timeout is its long-poll wait plus a margin.

Concurrency: one client per thread (it wraps one `httpx.Client`).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence
from urllib.parse import quote, urlsplit

import httpx

from lakelog.infra.error_codes import framework
from lakelog.infra.errors import ErrorKind, LakelogError

DEFAULT_URL = "http://127.0.0.1:8082"
URL_ENV = "LAKELOG_URL"

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
JSON = "application/json"

CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0
#: Added to a fetch's long-poll wait to get its read timeout: the node answers when the wait ends.
FETCH_TIMEOUT_MARGIN_S = 15.0
#: Bound on a fetch's long-poll wait asked by the client (the node caps it at fetch.max.wait.ms too).
MAX_FETCH_WAIT_MS = 10 * 60 * 1000


class ClientError(LakelogError):
    """A request to an ingest node failed."""

    kind = ErrorKind.TRANSIENT


class NodeUnreachableError(ClientError):
    """The node could not be reached, or did not answer in time."""

    kind = ErrorKind.TRANSIENT


class BadResponseError(ClientError):
    """The node answered something this client does not understand."""

    kind = ErrorKind.CORRUPT


class RequestFailedError(ClientError):
    """The node refused the request: carries the HTTP status and the Confluent `error_code`."""

    def __init__(self, message: str, status: int, error_code: int) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.kind = _kind_of(status)


def _kind_of(status: int) -> ErrorKind:
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 421:
        return ErrorKind.NOT_LEADER
    if 400 <= status < 500:
        return ErrorKind.INVALID_REQUEST
    return ErrorKind.TRANSIENT


def default_url() -> str:
    """`$LAKELOG_URL`, else the local default node."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def normalize_url(url: str) -> str:
    """`host:port` or `http(s)://host:port[/path]` -> the base URL without a trailing slash."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClientError(f"{url!r} is not a node URL; expected http://host:port")
    try:
        parts.port  # noqa: B018 -- raises on a malformed port
    except ValueError:
        raise ClientError(f"{url!r} has an invalid port") from None
    return url.rstrip("/")


@dataclass(frozen=True)
class FetchedRecord:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class FetchResponse:
    records: list[FetchedRecord]
    high_watermark: int | None
    log_start_offset: int | None


@dataclass(frozen=True)
class PartitionReplicas:
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (TypeError, ValueError):
        raise BadResponseError(f"the node returned a {what} that is not base64") from None


@dataclass(frozen=True)
class ClientSecurity:
    """How the client authenticates and checks the node's certificate (all optional).

    `user`/`password`: HTTP Basic; `api_key`: `Authorization: Bearer`; `cluster_secret`: sign every
    request as an operator holding the cluster secret (acts as the super user; for bootstrapping
    the first users and ACLs); `ca_cert`: the CA that signed the node's certificate (https:// URLs);
    `client_cert`/`client_key`: a client certificate for `ssl.client.auth`.
    """

    user: str | None = None
    password: str | None = None
    api_key: str | None = None
    cluster_secret: str | None = None
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @classmethod
    def from_env(cls, **overrides: str | None) -> "ClientSecurity":
        """`$LAKELOG_USER`, `$LAKELOG_PASSWORD`, `$LAKELOG_API_KEY`, `$LAKELOG_CLUSTER_SECRET`,
        `$LAKELOG_CA_CERT`, `$LAKELOG_CLIENT_CERT`, `$LAKELOG_CLIENT_KEY`, each overridden when given."""
        values = {f: os.environ.get(f"LAKELOG_{f.upper()}") or None for f in cls.__dataclass_fields__}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def httpx_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self.cluster_secret:
            from lakelog.ingest_api.security.cluster_auth import ClusterAuth
            from lakelog.ingest_api.security.context import CLUSTER_PRINCIPAL

            kw["auth"] = ClusterAuth(self.cluster_secret.encode(), 0, principal=CLUSTER_PRINCIPAL)
        elif self.api_key:
            kw["headers"] = {"Authorization": f"Bearer {self.api_key}"}
        elif self.user is not None:
            kw["auth"] = httpx.BasicAuth(self.user, self.password or "")
        if self.ca_cert or self.client_cert:
            import ssl

            try:
                ctx = ssl.create_default_context(cafile=self.ca_cert or None)
                if self.client_cert:
                    ctx.load_cert_chain(self.client_cert, self.client_key or None)
            except (OSError, ssl.SSLError) as e:
                raise ClientError(f"cannot load the TLS files: {e}") from None
            kw["verify"] = ctx
        return kw


class LakelogClient:
    """Talks to one ingest node. Use as a context manager, or call `close()`."""

    def __init__(self, url: str | None = None, *, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 timeout_s: float = REQUEST_TIMEOUT_S, transport: httpx.BaseTransport | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.url = normalize_url(url or default_url())
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        kw = (security or ClientSecurity()).httpx_kwargs()
        headers = {"User-Agent": "lakelog-cli", **kw.pop("headers", {})}
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout, transport=transport,
                                  headers=headers, **kw)
        self._cluster_id: str | None = None

    def __enter__(self) -> "LakelogClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ transport

    def _request(self, method: str, path: str, *, expect: Sequence[int] = (200,), **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TimeoutException:
            raise NodeUnreachableError(f"no answer from {self.url} in time ({method} {path})") from None
        except httpx.TransportError as e:
            raise NodeUnreachableError(f"cannot reach {self.url}: {_reason(e)}") from None
        if response.status_code not in expect:
            raise _error_from(response)
        return response

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        response = self._request(method, path, **kw)
        try:
            return response.json()
        except ValueError:
            raise BadResponseError(f"{method} {path} on {self.url} did not answer JSON") from None

    # ------------------------------------------------------------------ v3 admin

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            doc = self._json("GET", "/v3/clusters")
            try:
                self._cluster_id = str(doc["data"][0]["cluster_id"])
            except (KeyError, IndexError, TypeError):
                raise BadResponseError(f"{self.url}/v3/clusters names no cluster") from None
        return self._cluster_id

    def _topics_path(self, topic: str | None = None) -> str:
        base = f"/v3/clusters/{quote(self.cluster_id, safe='')}/topics"
        return base if topic is None else f"{base}/{quote(topic, safe='')}"

    def list_topics(self) -> list[dict[str, Any]]:
        return list(self._json("GET", self._topics_path()).get("data", []))

    def get_topic(self, topic: str) -> dict[str, Any]:
        return self._json("GET", self._topics_path(topic))

    def create_topic(self, topic: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"topic_name": topic,
                                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
        if partitions is not None:
            body["partitions_count"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        return self._json("POST", self._topics_path(), json=body, expect=(200, 201))

    def delete_topic(self, topic: str) -> None:
        self._request("DELETE", self._topics_path(topic), expect=(200, 204))

    def topic_configs(self, topic: str) -> list[dict[str, Any]]:
        return list(self._json("GET", f"{self._topics_path(topic)}/configs").get("data", []))

    def alter_topic_configs(self, topic: str, set_configs: dict[str, str], delete: Iterable[str] = ()) -> None:
        data = [{"name": k, "value": v} for k, v in set_configs.items()]
        data += [{"name": k, "operation": "DELETE"} for k in delete]
        self._request("POST", f"{self._topics_path(topic)}/configs:alter", json={"data": data},
                      expect=(200, 204))

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        return list(self._json("GET", f"{self._topics_path(topic)}/partitions").get("data", []))

    def partition_replicas(self, topic: str) -> list[PartitionReplicas]:
        """Leader, replicas and ISR of each partition of `topic`.

        Asks v3 `.../partitions/{p}/replicas` (Confluent's KafkaReplicaList); a node without that
        route answers with its v2 `/topics/{t}/partitions`, which carries the same facts.
        """
        parts = self.partitions(topic)
        out = []
        for p in parts:
            pid = int(p["partition_id"])
            try:
                doc = self._json("GET", f"{self._topics_path(topic)}/partitions/{pid}/replicas")
            except RequestFailedError as e:
                if e.error_code == framework("RouteNotFound").error_code:  # no such route (not: no such topic)
                    return self._partition_replicas_v2(topic)
                raise
            rows = doc.get("data", [])
            replicas = [int(r["broker_id"]) for r in rows]
            isr = [int(r["broker_id"]) for r in rows if r.get("is_in_sync")]
            leaders = [int(r["broker_id"]) for r in rows if r.get("is_leader")]
            out.append(PartitionReplicas(pid, leaders[0] if leaders else _leader_of(p), replicas, isr))
        return out

    def _partition_replicas_v2(self, topic: str) -> list[PartitionReplicas]:
        rows = self._json("GET", f"/topics/{quote(topic, safe='')}/partitions")
        return [PartitionReplicas(int(r["partition"]), r.get("leader"),
                                  [int(x["broker"]) for x in r.get("replicas", [])],
                                  [int(x["broker"]) for x in r.get("replicas", []) if x.get("in_sync")])
                for r in rows]

    # ------------------------------------------------------------------ consumer groups

    def list_groups(self) -> list[str]:
        """The group ids of the cluster."""
        return [str(g["group_id"]) for g in self._json("GET", "/groups").get("groups", [])]

    def describe_group(self, group: str) -> dict[str, Any]:
        """`GET /groups/{group}`: state, members, and per partition the committed offset, end and lag."""
        return self._json("GET", f"/groups/{quote(group, safe='')}")

    def group_offsets(self, group: str) -> list[dict[str, Any]]:
        """The group's committed offsets: `{"topic", "partition", "offset", "metadata"}` each."""
        return list(self._json("GET", f"/groups/{quote(group, safe='')}/offsets").get("offsets", []))

    def commit_group_offsets(self, group: str, offsets: Iterable[tuple[str, int, int]]) -> None:
        """Commit (topic, partition, offset) for a group without active members."""
        body = {"offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in offsets]}
        self._json("POST", f"/groups/{quote(group, safe='')}/offsets", headers={"Content-Type": V2}, json=body)

    # ------------------------------------------------------------------ records

    def produce(self, topic: str, records: Sequence[tuple[bytes | None, bytes | None]], *,
                partition: int | None = None, acks: str = "all") -> list[tuple[int, int]]:
        """Send (key, value) records in one request; returns (partition, offset) per record."""
        path = f"/topics/{quote(topic, safe='')}"
        if partition is not None:
            path += f"/partitions/{partition}"
        body = {"records": [{"key": _b64(k), "value": _b64(v)} for k, v in records]}
        doc = self._json("POST", path, params={"acks": acks}, json=body,
                         headers={"Content-Type": BINARY_V2, "Accept": V2})
        offsets = doc.get("offsets") if isinstance(doc, dict) else None
        if not isinstance(offsets, list) or len(offsets) != len(records):
            raise BadResponseError(f"the produce answer of {self.url} does not list one offset per record")
        for o in offsets:
            code = o.get("error_code")
            if code is not None:
                # Confluent codes start with the HTTP status: 40401 -> 404.
                status = int(code) // 100 if int(code) >= 10000 else 500
                raise RequestFailedError(o.get("error") or f"error_code {code}", status, int(code))
        return [(int(o["partition"]), int(o["offset"])) for o in offsets]

    def fetch(self, topic: str, partition: int, offset: int, *, timeout_ms: int = 0,
              max_bytes: int | None = None) -> FetchResponse:
        """Records from `offset` (below the high watermark), long-polling up to `timeout_ms`."""
        timeout_ms = max(0, min(timeout_ms, MAX_FETCH_WAIT_MS))
        params: dict[str, Any] = {"offset": offset, "timeout": timeout_ms}
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        timeout = httpx.Timeout(timeout_ms / 1000 + FETCH_TIMEOUT_MARGIN_S, connect=self._timeout.connect)
        response = self._request("GET", f"/topics/{quote(topic, safe='')}/partitions/{partition}/records",
                                 params=params, headers={"Accept": BINARY_V2}, timeout=timeout)
        try:
            rows = response.json()
        except ValueError:
            raise BadResponseError(f"the fetch answer of {self.url} is not JSON") from None
        if not isinstance(rows, list):
            raise BadResponseError(f"the fetch answer of {self.url} is not a list of records")
        records = [FetchedRecord(int(r["partition"]), int(r["offset"]), int(r.get("timestamp") or -1),
                                 _unb64(r.get("key"), "key"), _unb64(r.get("value"), "value")) for r in rows]
        return FetchResponse(records, _int_header(response, "X-Lakelog-High-Watermark"),
                             _int_header(response, "X-Lakelog-Log-Start-Offset"))

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning offset, end offset): the log start offset and the high watermark."""
        doc = self._json("GET", f"/topics/{quote(topic, safe='')}/partitions/{partition}/offsets")
        try:
            return int(doc["beginning_offset"]), int(doc["end_offset"])
        except (KeyError, TypeError, ValueError):
            raise BadResponseError(f"the offsets answer of {self.url} lacks beginning/end offsets") from None


def _leader_of(partition_doc: dict[str, Any]) -> int | None:
    """The broker id at the end of a v3 partition's `leader.related` URL."""
    related = (partition_doc.get("leader") or {}).get("related", "")
    tail = related.rstrip("/").rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _int_header(response: httpx.Response, name: str) -> int | None:
    value = response.headers.get(name)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _reason(e: httpx.TransportError) -> str:
    text = str(e) or type(e).__name__
    if isinstance(e, httpx.ConnectError) and "refused" in text.lower():
        return "connection refused (is a node running there?)"
    return text


def _error_from(response: httpx.Response) -> ClientError:
    status = response.status_code
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        code = doc.get("error_code")
        return RequestFailedError(doc["message"], status, code if isinstance(code, int) else status)
    snippet = response.text.strip().replace("\n", " ")[:200]
    where = f"{response.request.method} {response.request.url.path}"
    return RequestFailedError(f"HTTP {status} from {where}" + (f": {snippet}" if snippet else ""), status, status)
