"""The SQL server's own credentials on a secured `lakelog up --sql` cluster.

The SQL server reads the nodes for itself — it lists the topics and fetches their hot tail to
register the `lakelog.<topic>` views — and, when the cluster's authentication is on, the nodes
require credentials for that as for everything. `lakelog up --sql` gives it a service user of
its own, made with the cluster secret (which only `lakelog up` and who can read the data
directory hold), once the nodes are ready:

- the user `lakelog-sql` (SCRAM-SHA-256), its password generated on the first start and kept in
  `DATA_DIR/sql-service.properties` (0600, `user=` / `password=` lines), set again at each start
  (the user is created, or its password put back if someone changed it);
- the ACLs it needs and nothing more: ALLOW READ on every topic (`*`, LITERAL) and DESCRIBE on
  the cluster (the `_remote_index` view);
- handed to the SQL server in its environment (`$LAKELOG_USER` / `$LAKELOG_PASSWORD`, which the
  hot tail's readers take), never on a command line.

Its clients still present their own credentials and read only the topics they may READ
(spark_log/sql_server/security.py): the service user's grants are the server's, for registering views.
With authentication off nothing is made and the server gets no credentials.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx

from lakelog.logstore.fileutil import atomic_write

SERVICE_USER = "lakelog-sql"
SERVICE_FILE = "sql-service.properties"
REQUEST_TIMEOUT_S = 30.0


class SqlServiceError(Exception):
    """The service user could not be set up."""


def _load_or_create_password(path: Path) -> str:
    if path.exists():
        props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        if props.get("user", "").strip() == SERVICE_USER and props.get("password", "").strip():
            return props["password"].strip()
    password = secrets.token_urlsafe(32)
    atomic_write(path, f"user={SERVICE_USER}\npassword={password}\n".encode(), mode=0o600)
    return password


def authentication_on(url: str) -> bool:
    """What a node says: `GET /sql/access` without credentials answers 401 when authentication is on."""
    r = httpx.get(f"{url}/sql/access", timeout=REQUEST_TIMEOUT_S)
    if r.status_code == 401:
        return True
    if r.status_code == 200:
        return bool(r.json().get("authentication"))
    raise SqlServiceError(f"{url}/sql/access answered HTTP {r.status_code}")


def service_environment(url: str, data_dir: Path, secret: str) -> dict[str, str]:
    """The SQL server's environment additions: its service user's credentials when the cluster's
    authentication is on (the user and its ACLs made or refreshed through `url`), else none."""
    from lakelog.ingest_api.security.cluster_auth import ClusterAuth
    from lakelog.ingest_api.security.context import CLUSTER_PRINCIPAL

    if not authentication_on(url):
        return {}
    password = _load_or_create_password(data_dir / SERVICE_FILE)
    principal = f"User:{SERVICE_USER}"
    with httpx.Client(base_url=url, auth=ClusterAuth(secret.encode(), 0, principal=CLUSTER_PRINCIPAL),
                      timeout=REQUEST_TIMEOUT_S) as root:
        r = root.get("/v3/clusters")
        if r.status_code != 200:
            raise SqlServiceError(f"cannot read the cluster id: HTTP {r.status_code} {r.text[:200]}")
        cid = r.json()["data"][0]["cluster_id"]
        r = root.post(f"/v3/clusters/{cid}/users", json={"name": SERVICE_USER, "password": password})
        if r.status_code != 201:
            raise SqlServiceError(f"cannot set up the user {SERVICE_USER}: HTTP {r.status_code} {r.text[:200]}")
        for resource_type, name, operation in (("TOPIC", "*", "READ"), ("CLUSTER", "kafka-cluster", "DESCRIBE")):
            r = root.post(f"/v3/clusters/{cid}/acls", json={
                "principal": principal, "resource_type": resource_type, "resource_name": name,
                "pattern_type": "LITERAL", "operation": operation, "permission": "ALLOW"})
            if r.status_code != 201:
                raise SqlServiceError(f"cannot grant {operation} on {resource_type} {name} to {principal}: "
                                      f"HTTP {r.status_code} {r.text[:200]}")
    return {"LAKELOG_USER": SERVICE_USER, "LAKELOG_PASSWORD": password}
