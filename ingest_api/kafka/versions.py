"""The one table of the Kafka APIs this node answers, with the version range of each.

`ApiVersions` answers from this table; the listener refuses any other key or version with
UNSUPPORTED_VERSION. A range never exceeds what the codec (kio, see codec.py) carries; that is
checked at import. docs/kafka-protocol.md lists the same table for people.
"""

from __future__ import annotations

from kio.schema.index import api_key_map, schema_name_map

FETCH = 1
API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: What a SASL listener answers before its connection has authenticated; any other request closes it.
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})

#: api_key -> (name, lowest version, highest version) answered.
SUPPORTED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 13),
    1: ("Fetch", 4, 18),
    2: ("ListOffsets", 1, 9),
    3: ("Metadata", 0, 12),
    8: ("OffsetCommit", 2, 9),
    9: ("OffsetFetch", 1, 9),
    10: ("FindCoordinator", 0, 4),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 4),
    # v0 would be followed by raw, unframed SASL tokens: only v1 (tokens in SaslAuthenticate) is served.
    17: ("SaslHandshake", 1, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 5),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 5),
    23: ("OffsetForLeaderEpoch", 2, 4),
    29: ("DescribeAcls", 1, 3),
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    # Transactions version 1 (KIP-98, KIP-360, KIP-447, KIP-890 part 1): not KIP-890 part 2's versions.
    24: ("AddPartitionsToTxn", 0, 3),
    25: ("AddOffsetsToTxn", 0, 4),
    26: ("EndTxn", 0, 4),
    27: ("WriteTxnMarkers", 1, 1),
    28: ("TxnOffsetCommit", 0, 4),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    45: ("AlterPartitionReassignments", 0, 1),
    46: ("ListPartitionReassignments", 0, 0),
    47: ("OffsetDelete", 0, 0),
    48: ("DescribeClientQuotas", 0, 1),
    49: ("AlterClientQuotas", 0, 1),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    60: ("DescribeCluster", 0, 1),
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
}


def supports(api_key: int, version: int) -> bool:
    entry = SUPPORTED.get(api_key)
    return entry is not None and entry[1] <= version <= entry[2]


def _check_table() -> None:
    """Every range is one the codec has request and response types for."""
    for key, (name, low, high) in SUPPORTED.items():
        known = schema_name_map.get(api_key_map.get(key, ""), {})
        missing = [v for v in range(low, high + 1) if v not in known]
        if low > high or missing:
            raise AssertionError(f"{name} ({key}): versions {missing or (low, high)} have no codec types")


_check_table()
