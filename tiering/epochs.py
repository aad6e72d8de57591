"""The `.epochs` object of a remote segment: the leader-epoch entries covering the segment.

Text, in Kafka's checkpoint layout (as `leader-epoch-checkpoint`, see logstore/checkpoint.py):

    line 1   version      0
    line 2   count        number of entry lines
    line 3+  entries      "<leader epoch> <start offset>", ASCII decimal, one space, '\\n' ends lines

Entry (E, S): the leader of epoch E wrote the segment's batches from offset S (up to the next
entry's S, or the segment's end). Entries strictly increase in both fields; they are taken from
the batches' partition leader epochs while the segment is uploaded, so the first S is the base
offset of the segment's first batch. A segment whose batches carry no epoch (-1) has no entries.

Checksum: the layout has none; the manifest entry of the segment records the object's size and
CRC-32C, which a reader checks before decoding. A reader refuses another version.
Written once per upload attempt under a fresh segment id; never rewritten.
"""

from __future__ import annotations

from lakelog.tiering.errors import RemoteCorruptionError

EPOCHS_VERSION = 0


def encode(entries: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> bytes:
    lines = [str(EPOCHS_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode(buf: bytes, *, key: str | None = None) -> list[tuple[int, int]]:
    try:
        lines = buf.decode("ascii").splitlines()
        version = int(lines[0])
    except (UnicodeDecodeError, IndexError, ValueError):
        raise RemoteCorruptionError("leader epoch snapshot has no version line", key=key) from None
    if version != EPOCHS_VERSION:
        raise RemoteCorruptionError(f"leader epoch snapshot version {version} is not {EPOCHS_VERSION}", key=key)
    try:
        count = int(lines[1])
        entries = [(int(a), int(b)) for a, b in (line.split(" ") for line in lines[2:])]
    except (IndexError, ValueError):
        raise RemoteCorruptionError("leader epoch snapshot has a malformed line", key=key) from None
    if count != len(entries):
        raise RemoteCorruptionError(f"leader epoch snapshot declares {count} entries, holds {len(entries)}",
                                    key=key)
    for (e1, o1), (e2, o2) in zip(entries, entries[1:]):
        if not (e2 > e1 and o2 > o1):
            raise RemoteCorruptionError("leader epoch snapshot entries do not increase", key=key)
    return entries
