"""Partition replication among ingest nodes: leader and follower replicas, fetchers, purgatory."""
