"""Cluster credentials and topic READ ACLs on the SQL server (`lakelog sql-server`), and the
credentials `lakelog sql` presents to it.

When the cluster's authentication is on (`authentication.enabled`, found out by asking a node's
`GET /sql/access` without credentials: 401), the server does not use its shared token: every Spark
Connect call must carry a cluster user's credentials, checked by a node, and every query may read
only the topics its principal may READ. The work is done in the server's JVM by the project's jar
(spark_log/jvm/): `lakelog.spark.SqlAuthInterceptor` (`spark.connect.grpc.interceptor.classes`)
authenticates each call and makes the principal the Connect session's user id;
`lakelog.spark.SqlAccessExtension` (`spark.sql.extensions`) checks each analyzed plan of a client
session; `lakelog.spark.SqlAccess` holds the node answers (docs/security.md, "SQL").

Clients present: an API key as pyspark's `token=` (`Authorization: Bearer ...`), or a user and
password as the `authorization` metadata (`Basic base64(user:password)`), e.g.
`sc://localhost:15002/;authorization=Basic%20YWxpY2U6cHc=`.
"""

from __future__ import annotations

import base64
import time
from urllib.parse import quote

from lakelog.infra.errors import ErrorKind, LakelogError

INTERCEPTOR_CLASS = "lakelog.spark.SqlAuthInterceptor"
EXTENSION_CLASS = "lakelog.spark.SqlAccessExtension"
ACCESS_CLASS = "lakelog.spark.SqlAccess"
#: How long a node's answer for one credential is reused (ms): an ACL change applies within it.
DEFAULT_CACHE_MS = 5000
MAX_CACHE_MS = 3_600_000
#: How long one check may wait for a node (ms), and how long the server waits at start for a node
#: to say whether authentication is on (s).
REQUEST_TIMEOUT_MS = 10_000
DETECT_TIMEOUT_S = 120.0


class SqlSecurityError(LakelogError):
    """The SQL server cannot tell or set up the cluster's authentication."""

    kind = ErrorKind.CONFIGURATION


def cluster_authentication(nodes: str, timeout_s: float = DETECT_TIMEOUT_S) -> bool:
    """True when the nodes require authentication: `GET /sql/access` without credentials answers
    401 (authentication on) or 200 (off). Waits up to `timeout_s` for a node to answer; never
    guesses (a server that cannot tell does not start)."""
    import httpx

    urls = [u.strip().rstrip("/") for u in nodes.split(",") if u.strip()]
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        for url in urls:
            try:
                r = httpx.get(f"{url}/sql/access", timeout=10)
            except httpx.HTTPError as e:
                last = f"{url}: {e}"
                continue
            if r.status_code == 401:
                return True
            if r.status_code == 200:
                return bool(r.json().get("authentication"))
            if r.status_code == 404:
                raise SqlSecurityError(f"{url} does not serve /sql/access (an older node): cannot tell whether "
                                       f"the cluster requires authentication")
            last = f"{url}: HTTP {r.status_code}"
        if time.monotonic() >= deadline:
            raise SqlSecurityError(f"no node told whether the cluster requires authentication within "
                                   f"{timeout_s:g}s ({last})")
        time.sleep(1.0)


def server_conf(delta_extensions: str) -> dict[str, str]:
    """The static Spark settings of a server that checks cluster credentials (set at session start)."""
    extensions = ",".join(e for e in (delta_extensions, EXTENSION_CLASS) if e)
    return {"spark.connect.grpc.interceptor.classes": INTERCEPTOR_CLASS, "spark.sql.extensions": extensions}


def configure_server(spark, nodes: str, remote: str, cache_ms: int = DEFAULT_CACHE_MS) -> None:
    """Turn the checks on in the server's JVM; before its Connect service starts."""
    if not 0 <= cache_ms <= MAX_CACHE_MS:
        raise SqlSecurityError(f"the access cache must lie between 0 and {MAX_CACHE_MS} ms")
    try:
        access = getattr(spark._jvm.lakelog.spark, "SqlAccess")
        access.configure(nodes, int(cache_ms), REQUEST_TIMEOUT_MS, remote)
    except Exception as e:  # py4j: the class is missing when the jar is not on the class path
        raise SqlSecurityError(f"the JVM part of Lakelog (spark_log/jvm/lakelog-spark.jar, `make jvm`) is needed "
                               f"to check cluster credentials: {str(e).splitlines()[0][:200]}") from None


def client_url(url: str, *, api_key: str | None = None, user: str | None = None,
               password: str | None = None) -> str:
    """The Connect URL of `lakelog sql` with a user's cluster credentials: an API key as pyspark's
    token (Bearer), or user and password as Basic `authorization` metadata. pyspark sends a token
    over a plain channel only to the host `localhost`, so a loopback address is named so."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 15002
    if host in ("127.0.0.1", "::1", "localhost"):
        host = "localhost"
    if api_key:
        return f"sc://{host}:{port}/;token={quote(api_key, safe='')}"
    if user is not None:
        basic = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        return f"sc://{host}:{port}/;authorization={quote('Basic ' + basic, safe='')}"
    return f"sc://{host}:{port}"
