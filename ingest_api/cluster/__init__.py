"""Cluster metadata: the metadata image, the controller, the Raft host of the controller quorum,
topic names and the cluster's event log."""
