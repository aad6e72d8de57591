"""The Thrift JDBC/ODBC server beside the SQL server (`lakelog sql-server --thrift-port N`), for BI
tools that speak HiveServer2's protocol (JDBC `jdbc:hive2://HOST:N/default`, ODBC drivers for
Spark SQL / Hive).

It is Spark's own (`spark-hive-thriftserver_2.13`, shipped in pyspark's wheel), started in the SQL
server's application with `HiveThriftServer2.startWithContext`: each JDBC session is a new session
of the server's application, so it sees the `lakelog.<name>` views the server registers (global
temporary views in the database `lakelog`) and runs on the server's Spark. Binary transport, on
the `--listen` host (loopback unless named otherwise).

Who may connect, as on the server's Spark Connect channel:
- with the server's token (`--token-file`): HiveServer2's CUSTOM authentication
  (`lakelog.spark.ThriftTokenAuthenticator`, SASL PLAIN): the password must be the token, any user
  name (JDBC: `DriverManager.getConnection(url, "analyst", token)`);
- without a token: no authentication (`NONE`), as the Connect channel then has none.
- With the cluster's authentication on it does not start (`ThriftNotSupported`): the Thrift
  sessions would not be bound to a cluster principal, so READ ACLs could not apply to them, and a
  door that skips them is not opened. Use Spark Connect or `lakelog sql` there.
"""

from __future__ import annotations

import os
import socket

from lakelog.infra.errors import ErrorKind, LakelogError

AUTHENTICATOR_CLASS = "lakelog.spark.ThriftTokenAuthenticator"
SERVER_OBJECT = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2$"


class ThriftNotSupported(LakelogError):
    """The Thrift JDBC/ODBC server cannot start as asked."""

    kind = ErrorKind.CONFIGURATION


def check_startable(host: str, port: int, cluster_auth: bool) -> None:
    """Refuse before anything starts: with the cluster's authentication on, or a port taken."""
    if cluster_auth:
        raise ThriftNotSupported("--thrift-port: the Thrift JDBC/ODBC server does not start while the cluster's "
                                 "authentication is on (it cannot apply the users' READ ACLs); use Spark Connect "
                                 "or `lakelog sql`")
    if not 1 <= port <= 65535:
        raise ThriftNotSupported(f"--thrift-port {port}: a TCP port (1-65535)")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ThriftNotSupported(f"--thrift-port {port}: cannot listen on {host}:{port} ({e.strerror})") from None


def start(spark, host: str, port: int, token: str | None, scratch_dir: str):
    """Start the Thrift service in `spark`'s application; returns it (`stop(server)` ends it)."""
    jvm = spark._jvm
    # Hive's embedded metastore client (for the execution Hive) logs to derby.log in the working directory.
    jvm.java.lang.System.setProperty("derby.stream.error.file", os.path.join(scratch_dir, "derby.log"))
    conf = spark._jsparkSession.conf()
    conf.set("hive.server2.thrift.bind.host", host)
    conf.set("hive.server2.thrift.port", str(port))
    conf.set("hive.server2.transport.mode", "binary")
    conf.set("hive.server2.enable.doAs", "false")
    if token:
        getattr(jvm.lakelog.spark, "ThriftTokenAuthenticator").configure(token)
        conf.set("hive.server2.authentication", "CUSTOM")
        # Hive's CUSTOM provider reads its class from a HiveConf of its own, which takes system properties.
        jvm.java.lang.System.setProperty("hive.server2.custom.authentication.class", AUTHENTICATOR_CLASS)
    else:
        conf.set("hive.server2.authentication", "NONE")
    server_object = jvm.java.lang.Class.forName(SERVER_OBJECT).getField("MODULE$").get(None)
    return server_object.startWithContext(spark._jsparkSession.sqlContext())


def stop(server) -> None:
    server.stop()
