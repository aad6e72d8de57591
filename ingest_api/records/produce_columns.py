"""The records of one JSON / binary produce request as columns, and the batch built from them.

A v2 produce of 500 records used to become 500 `ProduceRecord` objects, then 500 `Record` objects,
each encoded in Python. The request is held here as lists instead — keys, values, the partition a
record names, headers — and a batch is built from them in one native call
(`logstore.batch_columns`, `_batchbuild.encode_columns`). A column that is the same for every
record (no key, no partition named, no headers) is None, and costs nothing per record.

Pure data: no I/O, no locking; one request's columns are used by one task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple, Sequence

from lakelog.logstore.batch_columns import build_batch_columns

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class ProduceRecord:
    """One record of a JSON / binary produce request, already turned into bytes."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class ProduceResult(NamedTuple):
    """Where one produced record landed."""

    partition: int
    offset: int


class ProduceResults(Sequence[ProduceResult]):
    """The (partition, offset) of each record of a request, in request order, kept as columns: a
    whole partition's run is (partition, first offset), and `offsets_json` writes Confluent's
    `offsets` array without a dict per record."""

    __slots__ = ("_partitions", "_offsets")

    def __init__(self, partitions: int | list[int], offsets: range | list[int]) -> None:
        self._partitions = partitions  # an int: every record went to that partition
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        p = self._partitions if isinstance(self._partitions, int) else self._partitions[i]
        return ProduceResult(p, self._offsets[i])

    def __iter__(self) -> Iterator[ProduceResult]:
        parts = self._partitions
        if isinstance(parts, int):
            return (ProduceResult(parts, o) for o in self._offsets)
        return map(ProduceResult, parts, self._offsets)

    def offsets_json(self, acks_none: bool = False) -> str:
        """The JSON array of `{"partition", "offset", "error_code": null, "error": null}`, one per
        record (offset -1 each with acks=0, which waits for no offset)."""
        tail = ',"error_code":null,"error":null}'
        if isinstance(self._partitions, int):
            head = '{"partition":%d,"offset":' % self._partitions
            if acks_none:
                return "[" + ",".join([head + "-1" + tail] * len(self._offsets)) + "]"
            return "[" + head + (tail + "," + head).join(map(str, self._offsets)) + tail + "]"
        item = '{"partition":%d,"offset":%d' + tail
        offsets = [-1] * len(self._offsets) if acks_none else self._offsets
        return "[" + ",".join(map(item.__mod__, zip(self._partitions, offsets))) + "]"


@dataclass(slots=True)
class ProduceColumns:
    """`values[i]`, `keys[i]`, `partitions[i]`, `headers[i]`: record i of the request, in order."""

    values: list[bytes | None]
    keys: list[bytes | None] | None = None  # None: every key is null
    partitions: list[int | None] | None = None  # None: no record names its partition
    headers: list[Headers] | None = None  # None: no record has headers

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def from_records(cls, records: Sequence[Any]) -> "ProduceColumns":
        """From `ProduceRecord`s (key, value, partition, headers attributes)."""
        keys = [r.key for r in records]
        partitions = [r.partition for r in records]
        headers = [r.headers for r in records]
        return cls([r.value for r in records],
                   keys if any(k is not None for k in keys) else None,
                   partitions if any(p is not None for p in partitions) else None,
                   headers if any(headers) else None)

    def payload_bytes(self) -> int:
        """Bytes of keys and values (the produce byte counters)."""
        total = sum(map(len, filter(None, self.values)))
        return total + (sum(map(len, filter(None, self.keys))) if self.keys is not None else 0)

    def take(self, indexes: Sequence[int]) -> "ProduceColumns":
        """The records at `indexes`, in that order."""
        return ProduceColumns([self.values[i] for i in indexes],
                              None if self.keys is None else [self.keys[i] for i in indexes],
                              None if self.partitions is None else [self.partitions[i] for i in indexes],
                              None if self.headers is None else [self.headers[i] for i in indexes])

    def build_batch(self, timestamp: int, **producer: int) -> bytes:
        """One RecordBatch v2 of every record, at offsets 0..n-1, all with `timestamp` (CreateTime);
        `producer`: producer_id, producer_epoch, base_sequence of an idempotent produce (and
        is_transactional for a transaction's batch)."""
        return build_batch_columns(self.values, timestamps=timestamp, keys=self.keys, headers=self.headers, **producer)
