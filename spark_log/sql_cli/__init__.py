"""`lakelog sql`: one query or an interactive prompt, through the SQL server's HTTP endpoint, then
Spark Connect, then a local session (`spark_log/sql_server/` is the server it asks)."""
