"""The SQL server's cluster-credential settings and the URLs `lakelog sql` presents them with (pure)."""

from __future__ import annotations

import base64
from urllib.parse import unquote

from lakelog.ingest_api.http import access
from lakelog.spark_log.sql_server.security import EXTENSION_CLASS, INTERCEPTOR_CLASS, client_url, server_conf


def _params(url: str) -> dict[str, str]:
    """As pyspark's ChannelBuilder reads them: `;`-separated, each exactly one `=`, values unquoted."""
    out = {}
    for p in url.split("/;", 1)[1].split(";"):
        kv = p.split("=")
        assert len(kv) == 2, p
        out[kv[0]] = unquote(kv[1])
    return out


def test_an_api_key_is_the_connect_token_and_a_password_the_basic_authorization_metadata():
    assert _params(client_url("sc://127.0.0.1:15002", api_key="llk_ab_c;d=")) == {"token": "llk_ab_c;d="}
    url = client_url("sc://127.0.0.1:16000", user="alice", password="p;w=:x")
    assert url.startswith("sc://localhost:16000/;")  # pyspark sends credentials in clear only to `localhost`
    header = _params(url)["authorization"]
    assert header.startswith("Basic ") and base64.b64decode(header[6:]).decode() == "alice:p;w=:x"
    assert client_url("sc://sql.example:15002") == "sc://sql.example:15002"


def test_the_server_keeps_delta_and_adds_its_interceptor_and_check_rule():
    conf = server_conf("io.delta.sql.DeltaSparkSessionExtension")
    assert conf["spark.sql.extensions"] == f"io.delta.sql.DeltaSparkSessionExtension,{EXTENSION_CLASS}"
    assert conf["spark.connect.grpc.interceptor.classes"] == INTERCEPTOR_CLASS


def test_sql_access_needs_authentication_and_is_checked_by_its_router():
    rule = access.requirement("GET", "/sql/access")
    assert rule is not None and rule.operation is None and rule.kind == "body"
