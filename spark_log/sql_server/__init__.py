"""The SQL server, `lakelog sql-server`: a Spark Connect server over the `lakelog.<name>` views, its
HTTP JSON endpoint (the console's `/v1/query`, `lakelog sql`'s `/v1/sql`), the Thrift JDBC/ODBC
server beside it, and the cluster credentials and READ ACLs it checks. `spark_log/sql_cli/`, the
`lakelog sql` command, is its client."""
