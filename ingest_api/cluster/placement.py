"""Replica placement: which brokers hold the replicas of each partition of a new topic.

Kafka's `AdminUtils.assignReplicasToBrokers`, made deterministic (Kafka draws `startIndex` and
`nextReplicaShift` at random; here the controller passes them in, derived from the topic name).
With `n` brokers sorted by node id:

* the first replica (the preferred leader) of partition `p` is broker `(start_index + p) mod n`, so
  preferred leaders are spread round-robin and their counts per broker differ by at most one;
* follower `j` (0-based) of partition `p` is broker `(first + 1 + (shift + j) mod (n - 1)) mod n`,
  never the first replica; `shift` starts at `next_replica_shift` and grows by one each time the
  partitions wrap around the broker list, so partitions with the same leader get different
  followers and the follower load spreads too.

Rack-aware (when every broker declares a rack): the broker list is first rearranged into Kafka's
"rack-alternated" order — racks sorted, brokers of each rack sorted, then one broker from each rack
in turn (`a1, b1, c1, a2, b2, ...`) — so consecutive brokers sit on different racks. Followers walk
the same positions as above (with the shift scaled by the number of racks) but skip a broker whose
rack already holds a replica of the partition while some rack holds none, and a broker that
already holds one while some broker holds none. So each partition spans `min(rf, #racks)` racks,
and its replicas are distinct. If only some brokers declare a rack, placement is rack-unaware
(Kafka refuses instead, unless told to ignore racks; a controller must not stop creating topics
because one broker's config lacks `broker.rack`).

Pure and deterministic: same inputs, same assignment.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakelog.ingest_api.cluster.errors import InvalidPartitionsError, InvalidReplicationFactorError

#: Upper bounds, so a request cannot make us build an arbitrarily large assignment.
MAX_PARTITIONS = 100_000
MAX_REPLICATION_FACTOR = 64


def assign_replicas(brokers: Sequence[tuple[int, str | None]], partitions: int, replication_factor: int,
                    start_index: int, next_replica_shift: int, *,
                    start_partition_id: int = 0) -> list[list[int]]:
    """Replica lists for partitions `start_partition_id .. start_partition_id + partitions - 1`.

    `brokers` are the (node id, rack) pairs of the brokers that may receive replicas (the live,
    unfenced ones); their order does not matter. `start_index` and `next_replica_shift` may be any
    non-negative integers. `start_partition_id` > 0 places
    partitions added to an existing topic, continuing the same pattern (Kafka's `addPartitions`).
    """
    if not 0 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(f"partition count {partitions} is outside [0, {MAX_PARTITIONS}]")
    ids = [node_id for node_id, _ in brokers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"broker ids repeat: {sorted(ids)}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > min(len(ids), MAX_REPLICATION_FACTOR):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {len(ids)} available broker(s)"
            if replication_factor > len(ids) else
            f"replication factor {replication_factor} is above the limit of {MAX_REPLICATION_FACTOR}")
    if start_index < 0 or next_replica_shift < 0 or start_partition_id < 0:
        raise ValueError("start_index, next_replica_shift and start_partition_id must be non-negative")
    racks = {node_id: rack for node_id, rack in brokers}
    if all(rack is not None for rack in racks.values()):
        return _rack_aware(racks, partitions, replication_factor, start_index, next_replica_shift,
                           start_partition_id)
    return _rack_unaware(sorted(ids), partitions, replication_factor, start_index, next_replica_shift,
                         start_partition_id)


def _replica_index(first_index: int, shift: int, j: int, n: int) -> int:
    """Kafka's `replicaIndex`: the j-th follower position, never `first_index` itself."""
    return (first_index + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(ids: list[int], partitions: int, rf: int, start_index: int, shift: int,
                  first_partition: int) -> list[list[int]]:
    n = len(ids)
    start_index %= n
    out: list[list[int]] = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        out.append([ids[first]] + [ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)])
    return out


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Kafka's `getRackAlternatedBrokerList`: one broker per rack in turn, racks and brokers sorted."""
    by_rack: dict[str, list[int]] = {}
    for node_id in sorted(racks):
        by_rack.setdefault(racks[node_id], []).append(node_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [col[i] for i in range(max(map(len, columns), default=0)) for col in columns if i < len(col)]


def _rack_aware(racks: dict[int, str], partitions: int, rf: int, start_index: int, shift: int,
                first_partition: int) -> list[list[int]]:
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    start_index %= n
    out: list[list[int]] = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used_brokers = {leader}
        k = 0
        for _ in range(rf - 1):
            # Terminates within n - 1 steps: any n - 1 consecutive k visit every other broker, and
            # an unused broker on an unused rack (or, once every rack is used, any unused broker)
            # always exists because rf <= n.
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                if ((rack not in used_racks or len(used_racks) == num_racks)
                        and (broker not in used_brokers or len(used_brokers) == n)):
                    break
            replicas.append(broker)
            used_racks.add(rack)
            used_brokers.add(broker)
        out.append(replicas)
    return out
