"""The broker's services over its replicas and the metadata image: the active controller's host,
registration and heartbeats, remote log reads, admin changes, reassignments, dynamic configs."""
