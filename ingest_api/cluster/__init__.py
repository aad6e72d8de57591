"""Cluster metadata: the metadata image, the controller, and the Raft host of the controller quorum."""
