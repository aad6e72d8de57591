"""Consumer groups: the group coordinator, partition assignors, committed offsets in `__consumer_offsets`,
and the HTTP consumer instances (Confluent REST Proxy v2) that are clients of the coordinator.

  * `hashing`     — which `__consumer_offsets` partition (and so which node) coordinates a group.
  * `assignors`   — range, round-robin and sticky assignment (pure functions).
  * `offsets_codec` — the byte layout of the records of `__consumer_offsets`.
  * `coordinator` — the group state machine (join / sync / heartbeat / leave / commit / tick), pure.
  * `service`     — the coordinator on a node: loading, appending commits, timers, forwarding.
  * `consumer`    — the REST-proxy-side consumer instances and their manager; an instance holds a
                    `consumer_subscription.SubscriptionState`, a `consumer_membership.InstanceMembership`
                    and a `consumer_records.InstanceRecords` (settings in `consumer_config`, leader reads
                    in `consumer_fetch`).
"""
