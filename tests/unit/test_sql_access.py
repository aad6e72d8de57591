"""The SQL server's client side without a JVM: tokens, Connect URLs, node lists, `up --sql` checks."""

from __future__ import annotations

import pytest

from lakelog.cli.cluster_spec import LauncherConfigError, build_spec, load_or_create_sql_token
from lakelog.spark_log.cli_common import CommandError
from lakelog.spark_log.sql_server.access import read_token, with_token
from lakelog.spark_log.hot_tail import NodeAccess


def test_a_token_goes_to_localhost_as_pyspark_sends_it_over_a_plain_channel_only_there():
    assert with_token("sc://127.0.0.1:15002", None) == "sc://127.0.0.1:15002"
    assert with_token("sc://127.0.0.1:16000", "abc") == "sc://localhost:16000/;token=abc"
    assert with_token("sc://db.example:15002", "abc") == "sc://db.example:15002/;token=abc"


def test_token_files_are_checked(tmp_path):
    good = tmp_path / "t"
    good.write_text("s3cret\n")
    assert read_token(str(good)) == "s3cret"
    for bad in ("", "a;b", "x" * 2000, "two\nlines"):
        (tmp_path / "b").write_text(bad)
        with pytest.raises(CommandError):
            read_token(str(tmp_path / "b"))
    with pytest.raises(CommandError, match="cannot read"):
        read_token(str(tmp_path / "missing"))


def test_up_makes_its_sql_token_once_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "data" / "sql.token"
    token = load_or_create_sql_token(path)
    assert len(token) == 64 and path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_sql_token(path) == token  # kept across restarts


def test_up_sql_port_must_not_be_a_node_port(tmp_path):
    spec = build_spec(nodes=3, data_dir=tmp_path, http_port=18000, sql_port=15002)
    assert spec.sql_url == "sc://127.0.0.1:15002"
    args = spec.sql_server_args()
    assert args[args.index("--nodes") + 1] == "http://127.0.0.1:18000,http://127.0.0.1:18001,http://127.0.0.1:18002"
    assert args[args.index("--token-file") + 1] == str(tmp_path.resolve() / "sql.token")
    with pytest.raises(LauncherConfigError, match="--sql-port 18001"):
        build_spec(nodes=3, data_dir=tmp_path, http_port=18000, sql_port=18001)
    assert build_spec(nodes=1, data_dir=tmp_path, http_port=18000).sql_port is None


def test_node_access_takes_a_list_of_nodes():
    access = NodeAccess.from_options(" http://a:1/, http://b:2 ", {})
    assert access.url == "http://a:1,http://b:2"
