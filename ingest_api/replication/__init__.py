"""Partition replication among ingest nodes: the replicas (`Partition`, `ReplicaManager`), leader and
follower state (`core`), fetchers, purgatory, the peer client."""
