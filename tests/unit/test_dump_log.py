"""`lakelog dump-log`: segments of our PartitionLog and of kafka-python's batch builder, indexes,
damage (bad CRC, torn tail), bad paths. Runs the installed CLI as a subprocess; a few bounds
(chunk size, batches too large to decode) are driven in-process through `dump_files`.
"""

from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from lakelog.infra.config import LogConfig
from lakelog.logstore.compression import Compression
from lakelog.logstore.dump import dump_files
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch, simple_batch

LAKELOG = Path(sys.executable).with_name("lakelog")
T0 = 1_700_000_000_000
SEG0 = "00000000000000000000"
CODEC_NAMES = {0: "NONE", 1: "GZIP", 2: "SNAPPY", 3: "LZ4", 4: "ZSTD"}


def dump(*args: str | Path) -> subprocess.CompletedProcess:
    assert LAKELOG.exists(), f"the lakelog entry point is not installed next to {sys.executable}"
    return subprocess.run([str(LAKELOG), "dump-log", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def lines(text: str) -> list[str]:
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def batch_lines(text: str) -> list[str]:
    return [ln for ln in lines(text) if ln.startswith("baseOffset: ")]


def record_lines(text: str) -> list[str]:
    return [ln for ln in lines(text) if ln.startswith("| offset: ")]


def field(line: str, name: str) -> str:
    m = re.search(rf"(?:^|[ |]){name}: (\S+)", line)
    assert m, f"{name} not in {line!r}"
    return m.group(1)


def frame(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of each batch, from the length fields alone (independent of the tool)."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        if pos + size > len(data):
            break
        out.append((pos, size))
        pos += size
    return out


# ---------------------------------------------------------------------------------------------
# Segments written by our PartitionLog


def write_partition_log(directory: Path) -> Path:
    """Five batches: uncompressed (null key, tombstone, bytes that are not UTF-8), gzip with
    headers, lz4 with a producer id and a sequence that wraps, zstd, snappy."""
    log = PartitionLog(directory, LogConfig({"index.interval.bytes": 1}))
    log.append_as_leader(simple_batch([(b"k", b"hello"), (None, b"caf\xc3\xa9 \xff\n"), (b"gone", None)],
                                      timestamp=T0), 3)
    log.append_as_leader(build_batch([Record(i, T0 + 100 + i, b"k%d" % i, b"v" * 50, (("h1", b"x"), ("h2", None)))
                                      for i in range(4)], compression=Compression.GZIP), 3)
    log.append_as_leader(build_batch([Record(i, T0 + 200, None, b"lz" * 40) for i in range(3)],
                                     compression=Compression.LZ4, producer_id=7, producer_epoch=1,
                                     base_sequence=2**31 - 2), 4)
    log.append_as_leader(build_batch([Record(i, T0 + 300, b"z", b"zstd-%d" % i) for i in range(2)],
                                     compression=Compression.ZSTD), 4)
    log.append_as_leader(build_batch([Record(0, T0 + 400, b"s", b"snappy" * 10)],
                                     compression=Compression.SNAPPY), 4)
    log.close()
    return directory / f"{SEG0}.log"


@pytest.fixture(scope="module")
def our_log(tmp_path_factory) -> Path:
    return write_partition_log(tmp_path_factory.mktemp("ours") / "t-0")


def test_partition_log_segment_exact_lines_with_print_data_log(our_log):
    data = our_log.read_bytes()
    (pos0, size0), *_ = frame(data)
    crc0 = struct.unpack_from(">I", data, 17)[0]
    res = dump(our_log, "--print-data-log")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    meta = ("magic: 2 compresscodec: NONE producerId: -1 producerEpoch: -1 sequence: -1 "
            "isTransactional: false headerKeys: []")
    assert lines(res.stdout)[:6] == [
        f"Dumping {our_log}",
        "Log starting offset: 0",
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false isControl: false "
        f"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {T0} size: {size0} magic: 2 "
        f"compresscodec: NONE crc: {crc0} isvalid: true",
        f"| offset: 0 position: 0 CreateTime: {T0} keysize: 1 valuesize: 5 {meta} key: k payload: hello",
        # No key: no `key:` field. Invalid UTF-8 is escaped, and so is the newline.
        f"| offset: 1 position: 0 CreateTime: {T0} keysize: -1 valuesize: 8 {meta} payload: café \\xff\\n",
        # A tombstone prints no `payload:` (as Kafka's tool); valuesize -1 says so.
        f"| offset: 2 position: 0 CreateTime: {T0} keysize: 4 valuesize: -1 {meta} key: gone",
    ]


def test_partition_log_segment_batches_records_codecs_and_sequences(our_log):
    data = our_log.read_bytes()
    frames = frame(data)
    assert sum(size for _, size in frames) == len(data)
    res = dump(our_log)
    assert res.returncode == 0, res.stderr
    batches, records = batch_lines(res.stdout), record_lines(res.stdout)
    assert len(batches) == 5 and len(records) == 3 + 4 + 3 + 2 + 1
    assert len(lines(res.stdout)) == 2 + 5 + 13
    assert [field(b, "compresscodec") for b in batches] == ["NONE", "GZIP", "LZ4", "ZSTD", "SNAPPY"]
    assert [int(field(b, "position")) for b in batches] == [p for p, _ in frames]
    assert [int(field(b, "size")) for b in batches] == [s for _, s in frames]
    assert [field(b, "partitionLeaderEpoch") for b in batches] == ["3", "3", "4", "4", "4"]
    assert all(field(b, "isvalid") == "true" for b in batches)
    assert [int(field(r, "offset")) for r in records] == list(range(13))
    # Every record line carries its batch's position and codec.
    by_offset = {int(field(r, "offset")): r for r in records}
    assert field(by_offset[5], "position") == str(frames[1][0])
    assert field(by_offset[5], "compresscodec") == "GZIP"
    assert field(by_offset[5], "CreateTime") == str(T0 + 102)
    assert by_offset[5].endswith("headerKeys: [h1,h2]")  # without --print-data-log: no key or payload
    # lz4 batch: producer 7, sequences 2^31-2, 2^31-1, then wrapped to 0.
    assert field(batches[2], "baseSequence") == str(2**31 - 2) and field(batches[2], "lastSequence") == "0"
    assert [field(by_offset[o], "sequence") for o in (7, 8, 9)] == [str(2**31 - 2), str(2**31 - 1), "0"]
    assert field(by_offset[7], "producerId") == "7" and field(by_offset[7], "producerEpoch") == "1"
    assert field(by_offset[7], "keysize") == "-1" and field(by_offset[7], "valuesize") == "80"
    assert not any(" payload: " in r or " key: " in r for r in records)


def test_print_data_log_prints_compressed_payloads(our_log):
    res = dump(our_log, "--print-data-log")
    assert res.returncode == 0, res.stderr
    by_offset = {int(field(r, "offset")): r for r in record_lines(res.stdout)}
    assert by_offset[4].endswith("headerKeys: [h1,h2] key: k1 payload: " + "v" * 50)
    assert by_offset[8].endswith("headerKeys: [] payload: " + "lz" * 40)  # null key: no key field
    assert by_offset[11].endswith("key: z payload: zstd-1")
    assert by_offset[12].endswith("key: s payload: " + "snappy" * 10)


def test_log_append_time_batches_label_records_with_the_batch_time(tmp_path):
    now_s = 1_700_000_999.5
    log = PartitionLog(tmp_path / "t-0", LogConfig({"message.timestamp.type": "LogAppendTime"}),
                       clock=lambda: now_s)
    log.append_as_leader(build_batch([Record(0, T0, b"a", b"1"), Record(1, T0 + 7, b"b", b"2")]), 0)
    log.close()
    res = dump(tmp_path / "t-0" / f"{SEG0}.log")
    assert res.returncode == 0, res.stderr
    (batch,) = batch_lines(res.stdout)
    assert " LogAppendTime: 1700000999500 " in batch and "CreateTime" not in res.stdout
    assert [field(r, "LogAppendTime") for r in record_lines(res.stdout)] == ["1700000999500"] * 2


# ---------------------------------------------------------------------------------------------
# A segment assembled from kafka-python's batches (an independent implementation of the format)


def kafka_python_batch(records, *, compression=0, transactional=False, producer_id=-1,
                       producer_epoch=-1, base_sequence=-1, control=False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression,
                                        is_transactional=transactional, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                                        batch_size=1 << 20)
    for delta, (ts, key, value, headers) in enumerate(records):
        assert builder.append(delta, ts, key, value, headers) is not None
    buf = builder.build()
    if control:  # only brokers write control batches: set bit 5 and refresh the CRC
        attributes = struct.unpack_from(">h", buf, 21)[0] | 0x20
        struct.pack_into(">h", buf, 21, attributes)
        struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.fixture(scope="module")
def kafka_log(tmp_path_factory) -> Path:
    text = [b"kafka-python payload %d " % i * 4 for i in range(6)]
    batches = [
        kafka_python_batch([(T0, b"a", b"one", [("trace", b"t1")]), (T0 + 1, None, b"two", []),
                            (T0 + 2, b"c", None, [("x", None), ("y", b"")])]),
        kafka_python_batch([(T0 + 10, b"tx", b"in-txn-0", []), (T0 + 11, b"tx", b"in-txn-1", [])],
                           transactional=True, producer_id=4242, producer_epoch=3, base_sequence=17),
        kafka_python_batch([(T0 + 12, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7), [])],
                           transactional=True, producer_id=4242, producer_epoch=3, control=True),
        kafka_python_batch([(T0 + 20 + i, b"g", v, []) for i, v in enumerate(text)], compression=1),
        kafka_python_batch([(T0 + 30, None, v, []) for v in text[:3]], compression=3),
        kafka_python_batch([(T0 + 40, b"zk", v, [("h", b"v")]) for v in text[:2]], compression=4),
        kafka_python_batch([(T0 + 50, None, v, []) for v in text[3:]], compression=2),
    ]
    out = bytearray()
    offset = 100
    for buf in batches:
        b = bytearray(buf)
        struct.pack_into(">q", b, 0, offset)  # base offset and leader epoch lie outside the CRC
        struct.pack_into(">i", b, 12, 5)
        offset += struct.unpack_from(">i", b, 23)[0] + 1
        out += b
    path = tmp_path_factory.mktemp("kafka") / "00000000000000000100.log"
    path.write_bytes(bytes(out))
    return path


def expected_from_kafka_python(data: bytes, print_data_log: bool) -> list[str]:
    """The dump, computed from kafka-python's own reading of each batch."""
    out = []
    for pos, size in frame(data):
        batch = DefaultRecordBatch(bytearray(data[pos:pos + size]))
        codec = CODEC_NAMES[batch.compression_type]
        ts_type = "LogAppendTime" if batch.timestamp_type else "CreateTime"
        tx = str(batch.is_transactional).lower()
        out.append(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.records_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.leader_epoch} "
            f"isTransactional: {tx} isControl: {str(batch.is_control_batch).lower()} "
            f"deleteHorizonMs: OptionalLong.empty position: {pos} {ts_type}: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} compresscodec: {codec} crc: {batch.crc} "
            f"isvalid: {str(batch.validate_crc()).lower()}")
        for record in batch:
            seq = -1 if batch.base_sequence < 0 else batch.base_sequence + record.offset - batch.base_offset
            line = (f"| offset: {record.offset} position: {pos} {ts_type}: {record.timestamp} "
                    f"keysize: {-1 if record.key is None else len(record.key)} "
                    f"valuesize: {-1 if record.value is None else len(record.value)} magic: 2 "
                    f"compresscodec: {codec} producerId: {batch.producer_id} "
                    f"producerEpoch: {batch.producer_epoch} sequence: {seq} isTransactional: {tx} "
                    f"headerKeys: [{','.join(k for k, _ in record.headers)}]")
            if batch.is_control_batch:
                coordinator_epoch = struct.unpack(">hi", record.value)[1]
                line += f" endTxnMarker: {'COMMIT' if record.commit else 'ABORT'} coordinatorEpoch: {coordinator_epoch}"
            elif print_data_log:
                if record.key is not None:
                    line += f" key: {record.key.decode()}"
                if record.value is not None:
                    line += f" payload: {record.value.decode()}"
            out.append(line)
    return out


def test_kafka_python_segment_matches_kafka_pythons_reading(kafka_log):
    data = kafka_log.read_bytes()
    for print_data_log in (False, True):
        res = dump(kafka_log, *(["--print-data-log"] if print_data_log else []))
        assert res.returncode == 0, res.stderr
        got = lines(res.stdout)
        assert got[:2] == [f"Dumping {kafka_log}", "Log starting offset: 100"]
        assert got[2:] == expected_from_kafka_python(data, print_data_log)


def test_kafka_python_segment_transactions_markers_and_codecs(kafka_log):
    res = dump(kafka_log, "--print-data-log")
    assert res.returncode == 0, res.stderr
    batches, records = batch_lines(res.stdout), record_lines(res.stdout)
    assert [field(b, "compresscodec") for b in batches] == ["NONE", "NONE", "NONE", "GZIP", "LZ4", "ZSTD", "SNAPPY"]
    assert [field(b, "isTransactional") for b in batches[:3]] == ["false", "true", "true"]
    assert [field(b, "isControl") for b in batches[:3]] == ["false", "false", "true"]
    assert field(batches[1], "baseSequence") == "17" and field(batches[1], "lastSequence") == "18"
    assert [int(field(b, "baseOffset")) for b in batches] == [100, 103, 105, 106, 112, 115, 117]
    by_offset = {int(field(r, "offset")): r for r in records}
    assert [field(by_offset[o], "sequence") for o in (103, 104)] == ["17", "18"]
    assert field(by_offset[103], "producerId") == "4242"
    assert by_offset[105].endswith("headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert " payload: " not in by_offset[105]  # a marker's bytes are not data
    assert by_offset[100].endswith("headerKeys: [trace] key: a payload: one")
    assert by_offset[102].endswith("headerKeys: [x,y] key: c")
    assert field(by_offset[107], "compresscodec") == "GZIP"
    assert len(records) == 3 + 2 + 1 + 6 + 3 + 2 + 3


# ---------------------------------------------------------------------------------------------
# Indexes


def test_index_and_timeindex_of_a_partition_log(our_log):
    index, timeindex = our_log.with_suffix(".index"), our_log.with_suffix(".timeindex")
    raw_index = list(struct.iter_unpack(">II", index.read_bytes()))
    raw_time = list(struct.iter_unpack(">qI", timeindex.read_bytes()))
    assert len(raw_index) >= 3 and len(raw_time) >= 3
    res = dump(index, timeindex)
    assert res.returncode == 0, res.stderr
    assert lines(res.stdout) == (
        [f"Dumping {index}"] + [f"offset: {rel} position: {pos}" for rel, pos in raw_index]
        + [f"Dumping {timeindex}"] + [f"timestamp: {ts} offset: {rel}" for ts, rel in raw_time])


def test_damaged_indexes_get_notes_after_their_entries(our_log, tmp_path):
    data = our_log.read_bytes()
    (p0, _), (p1, _), (p2, _), *_ = frame(data)
    shutil.copy(our_log, tmp_path / f"{SEG0}.log")
    index = tmp_path / f"{SEG0}.index"
    # (6, p1) is wrong: the batch at p1 holds 3..6, but (2, p1)... entry 2 goes backwards, entry 3
    # points into the middle of a batch, then a torn 3-byte tail after two zero entries.
    index.write_bytes(struct.pack(">IIIIIIII", 6, p1, 2, p2, 9, p2 + 5, 9, p2) + bytes(16) + b"\x00\x00\x01")
    timeindex = tmp_path / f"{SEG0}.timeindex"
    timeindex.write_bytes(struct.pack(">qIqIqI", T0 + 103, 6, T0 + 50, 9, T0 + 201, 9) + bytes(24))
    res = dump(index, timeindex)
    assert res.returncode == 0, res.stderr
    out = lines(res.stdout)
    i_time = out.index(f"Dumping {timeindex}")
    index_out, time_out = out[1:i_time], out[i_time + 1:]
    assert index_out[:4] == [f"offset: 6 position: {p1}", f"offset: 2 position: {p2}",
                             f"offset: 9 position: {p2 + 5}", f"offset: 9 position: {p2}"]
    notes = index_out[4:]
    assert f"Out of order: entry offset: 2 position: {p2} follows offset: 6 position: {p1}" in notes
    assert any(n.startswith(f"Does not match the log: entry offset: 2 position: {p2}") for n in notes)
    assert any(n.startswith(f"Does not match the log: entry offset: 9 position: {p2 + 5}") for n in notes)
    assert "2 all-zero entries at the end are unused (preallocated) space, not shown" in notes
    assert "Torn entry: the last 3 bytes are not a whole 8-byte entry" in notes
    assert not any(n.startswith("Does not match the log: entry offset: 6 ") for n in notes)
    assert time_out[:3] == [f"timestamp: {T0 + 103} offset: 6", f"timestamp: {T0 + 50} offset: 9",
                            f"timestamp: {T0 + 201} offset: 9"]
    tnotes = time_out[3:]
    assert any(n.startswith(f"Out of order: entry timestamp: {T0 + 50} offset: 9") for n in tnotes)
    assert any(n.startswith(f"Does not match the log: entry timestamp: {T0 + 50} offset: 9") for n in tnotes)
    assert any(n.startswith(f"Does not match the log: entry timestamp: {T0 + 201} offset: 9") for n in tnotes)
    assert not any(f"timestamp: {T0 + 103} offset: 6:" in n for n in tnotes)  # the good entry
    assert "2 all-zero entries at the end are unused (preallocated) space, not shown" in tnotes


def test_zero_entries_followed_by_real_ones_are_shown(our_log, tmp_path):
    (_, _), (p1, _), (p2, _), *_ = frame(our_log.read_bytes())
    shutil.copy(our_log, tmp_path / f"{SEG0}.log")
    index = tmp_path / f"{SEG0}.index"
    index.write_bytes(struct.pack(">IIIIIIII", 6, p1, 0, 0, 9, p2, 0, 0))
    code, out, _ = run_in_process([index])
    assert code == 0
    assert lines(out) == [f"Dumping {index}", f"offset: 6 position: {p1}", "offset: 0 position: 0",
                          f"offset: 9 position: {p2}",
                          f"Out of order: entry offset: 0 position: 0 follows offset: 6 position: {p1}",
                          "1 all-zero entries at the end are unused (preallocated) space, not shown"]


def test_verify_index_only_prints_notes_not_entries(our_log, tmp_path):
    index = our_log.with_suffix(".index")
    out = io.StringIO()
    assert dump_files([index], print_data_log=False, out=out, verify_index_only=True) == 0
    n = len(index.read_bytes()) // 8
    assert lines(out.getvalue()) == [f"Dumping {index}", f"{index}: {n} entries, in order and matching the log."]
    shutil.copy(our_log, tmp_path / f"{SEG0}.log")
    bad = tmp_path / f"{SEG0}.index"
    bad.write_bytes(struct.pack(">II", 1, 0))  # offset 1 is in the first batch at 0: fine
    bad.write_bytes(bad.read_bytes() + struct.pack(">II", 0, 50))
    out = io.StringIO()
    assert dump_files([bad], print_data_log=False, out=out, verify_index_only=True) == 0
    got = lines(out.getvalue())
    assert got[0] == f"Dumping {bad}" and not any(g.startswith("offset: ") for g in got)
    assert any(g.startswith("Out of order: entry offset: 0 position: 50") for g in got)


def test_index_without_its_log_is_dumped_and_says_so(tmp_path):
    index = tmp_path / "00000000000000000042.index"
    index.write_bytes(struct.pack(">II", 3, 0))
    empty = tmp_path / f"{SEG0}.timeindex"
    empty.write_bytes(b"")
    res = dump(index, empty)
    assert res.returncode == 0, res.stderr
    out = lines(res.stdout)
    assert out[1] == "offset: 45 position: 0"
    assert out[2].startswith(f"Not checked against the log: cannot open {tmp_path / '00000000000000000042.log'}")
    assert out[3:] == [f"Dumping {empty}", f"{empty} is empty.",
                       f"Not checked against the log: cannot open {tmp_path / (SEG0 + '.log')}: "
                       "No such file or directory"]


# ---------------------------------------------------------------------------------------------
# Damage


def test_bad_crc_batches_are_flagged_and_the_dump_goes_on(our_log, tmp_path):
    data = bytearray(our_log.read_bytes())
    frames = frame(bytes(data))
    hello = data.index(b"hello")
    data[hello] ^= 0x20  # 'h' -> 'H' in the first batch: its records still decode
    p1, s1 = frames[1]
    data[p1 + s1 - 20] ^= 0xFF  # inside the gzip stream of the second batch
    path = tmp_path / f"{SEG0}.log"
    path.write_bytes(bytes(data))
    res = dump(path, "--print-data-log")
    assert res.returncode == 0, res.stderr
    batches, records = batch_lines(res.stdout), record_lines(res.stdout)
    assert [field(b, "isvalid") for b in batches] == ["false", "false", "true", "true", "true"]
    assert records[0].endswith("key: k payload: Hello")
    # Whatever the damaged gzip batch yields, the later batches are all there.
    assert [int(field(r, "offset")) for r in records if int(field(r, "offset")) >= 7] == list(range(7, 13))
    assert "Found" not in res.stdout


def test_torn_tail_garbage_and_impossible_length_report_invalid_bytes(our_log, tmp_path):
    data = our_log.read_bytes()
    last_pos, last_size = frame(data)[-1]
    torn = tmp_path / "torn" / f"{SEG0}.log"
    short = tmp_path / "short" / f"{SEG0}.log"
    bogus = tmp_path / "bogus" / f"{SEG0}.log"
    for p in (torn, short, bogus):
        p.parent.mkdir()
    torn.write_bytes(data[:-10])
    short.write_bytes(data + b"\x00" * 5)
    bogus.write_bytes(data + struct.pack(">qi", 13, 3) + b"xyz")
    res = dump(torn, short, bogus)
    assert res.returncode == 0, res.stderr
    out = lines(res.stdout)
    assert f"Found {last_size - 10} invalid bytes at the end of {torn}" in out
    assert f"Found 5 invalid bytes at the end of {short}" in out
    assert f"Found 15 invalid bytes at the end of {bogus}" in out
    i = out.index(f"Found {last_size - 10} invalid bytes at the end of {torn}")
    assert out[i + 1] == f"  at position {last_pos}: a batch of {last_size} bytes runs past the end of the file " \
                         f"({last_size - 10} bytes left)"
    assert any(ln.endswith("batch length 3 is impossible") for ln in out)
    per_file = res.stdout.split("Dumping ")[1:]
    assert [len(batch_lines(t)) for t in per_file] == [4, 5, 5]


def test_a_file_of_zeros_and_an_empty_log(tmp_path):
    zeros = tmp_path / "00000000000000000007.log"
    zeros.write_bytes(bytes(100))
    empty = tmp_path / f"{SEG0}.log"
    empty.write_bytes(b"")
    res = dump(zeros, empty)
    assert res.returncode == 0, res.stderr
    assert lines(res.stdout) == [f"Dumping {zeros}", "Log starting offset: 7",
                                 f"Found 100 invalid bytes at the end of {zeros}",
                                 "  at position 0: batch length 0 is impossible",
                                 f"Dumping {empty}", "Log starting offset: 0"]


# ---------------------------------------------------------------------------------------------
# Paths


def test_bad_paths_give_clear_errors_and_exit_codes(our_log, tmp_path):
    missing = tmp_path / f"{SEG0}.log"
    res = dump(missing)
    assert res.returncode == 1 and res.stderr == f"lakelog dump-log: {missing}: no such file\n"
    assert res.stdout == ""
    snapshot = tmp_path / f"{SEG0}.snapshot"
    snapshot.write_bytes(b"x")
    # The good file is still dumped; the exit code is the worst one (2: unknown suffix).
    res = dump(our_log, missing, snapshot)
    assert res.returncode == 2
    assert len(batch_lines(res.stdout)) == 5
    assert lines(res.stderr) == [f"lakelog dump-log: {missing}: no such file",
                                 f"lakelog dump-log: {snapshot}: unknown file suffix .snapshot; dump-log reads "
                                 f".log, .index, .timeindex and .txnindex segment files"]


def test_files_that_are_not_segments(our_log, tmp_path):
    misnamed = tmp_path / "segment.log"
    misnamed.write_bytes(our_log.read_bytes())
    shortname = tmp_path / "0000.index"
    shortname.write_bytes(b"")
    noname = tmp_path / "notes"
    noname.write_bytes(b"")
    for path, code, message in [
            (misnamed, 1, "not a segment file: the name must be the base offset in 20 digits, "
                          "e.g. 00000000000000000000.log"),
            (shortname, 1, "not a segment file"),
            (tmp_path, 1, "is a directory"),
            (noname, 2, "unknown file suffix (none)")]:
        got_code, out, err = run_in_process([path])
        assert got_code == code, path
        assert err.startswith(f"lakelog dump-log: {path}: {message}")
        assert out == ""


def test_transient_suffixes_are_segment_files(our_log, tmp_path):
    swap = tmp_path / f"{SEG0}.log.swap"
    swap.write_bytes(our_log.read_bytes())
    res = dump(swap)
    assert res.returncode == 0, res.stderr
    assert len(batch_lines(res.stdout)) == 5


def test_remote_segment_object_names_are_segment_files(our_log, tmp_path):
    """A segment as the remote tier stores it: `<base offset>-<segment id>.log`, its indexes beside it."""
    stem = f"{SEG0}-{'0123456789abcdef' * 2}"
    remote_log = tmp_path / f"{stem}.log"
    remote_log.write_bytes(our_log.read_bytes())
    (tmp_path / f"{stem}.index").write_bytes(our_log.with_suffix(".index").read_bytes())
    local = dump(our_log)
    res = dump(remote_log)
    assert res.returncode == 0, res.stderr
    assert batch_lines(res.stdout) == batch_lines(local.stdout)
    res = dump(tmp_path / f"{stem}.index")
    assert res.returncode == 0 and "Mismatches" not in res.stdout and "no log" not in res.stdout, res.stdout
    bad = tmp_path / f"{SEG0}-not-an-id.log"
    bad.write_bytes(b"")
    got_code, _, err = run_in_process([bad])
    assert got_code == 1 and "<base offset>-<segment id>.log" in err


# ---------------------------------------------------------------------------------------------
# Bounds and formats, in-process


def run_in_process(paths, **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = dump_files(paths, print_data_log=True, out=out, err=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def test_output_does_not_depend_on_the_read_chunk_size(our_log, kafka_log):
    paths = [our_log, kafka_log, our_log.with_suffix(".index"), our_log.with_suffix(".timeindex")]
    reference = run_in_process(paths)
    assert reference[0] == 0 and len(record_lines(reference[1])) > 30
    for chunk in (1, 61, 100, 333):
        assert run_in_process(paths, chunk_bytes=chunk) == reference


def test_batches_above_the_decode_limit_print_header_and_streamed_crc(our_log, tmp_path):
    data = bytearray(our_log.read_bytes())
    frames = frame(bytes(data))
    limit = 110  # the uncompressed batch (100 bytes) decodes, the gzip one (>110) does not
    assert frames[0][1] <= limit < frames[1][1]
    code, out, _ = run_in_process([our_log], max_decoded_batch_bytes=limit, chunk_bytes=64)
    assert code == 0
    assert all(field(b, "isvalid") == "true" for b in batch_lines(out))
    assert out.count("| records not shown: the batch of ") == sum(1 for _, s in frames if s > limit)
    counts = [3, 4, 3, 2, 1]  # records per batch, as written
    decoded = [o for i, (_, s) in enumerate(frames) if s <= limit
               for o in range(sum(counts[:i]), sum(counts[:i + 1]))]
    assert 0 < len(decoded) < 13
    assert [int(field(r, "offset")) for r in record_lines(out)] == decoded
    p1, s1 = frames[1]
    data[p1 + s1 - 1] ^= 1
    damaged = tmp_path / f"{SEG0}.log"
    damaged.write_bytes(bytes(data))
    _, out, _ = run_in_process([damaged], max_decoded_batch_bytes=limit, chunk_bytes=64)
    assert [field(b, "isvalid") for b in batch_lines(out)] == ["true", "false", "true", "true", "true"]


def legacy_message(offset: int, magic: int, value: bytes, *, corrupt: bool = False) -> bytes:
    body = bytes([magic, 0]) + (struct.pack(">q", T0) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body) ^ (1 if corrupt else 0)
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def test_magic_0_and_1_messages_are_framed_checked_and_skipped(tmp_path):
    v2 = bytearray(simple_batch([(b"k", b"after")], timestamp=T0))
    struct.pack_into(">q", v2, 0, 3)
    path = tmp_path / f"{SEG0}.log"
    path.write_bytes(legacy_message(0, 0, b"old") + legacy_message(1, 1, b"older")
                     + legacy_message(2, 1, b"bad", corrupt=True) + bytes(v2))
    code, out, err = run_in_process([path])
    assert code == 0 and err == ""
    got = lines(out)
    assert got[2].startswith("offset: 0 position: 0 size: 29 magic: 0 isvalid: true")
    assert got[3].startswith("offset: 1 position: 29 size: 39 magic: 1 isvalid: true")
    assert got[4].startswith("offset: 2 position: 68 size: 37 magic: 1 isvalid: false")
    assert got[5].startswith("baseOffset: 3 lastOffset: 3 ") and " position: 105 " in got[5]
    assert got[6].endswith("key: k payload: after")


def test_control_records_other_than_markers_name_their_type(tmp_path):
    batch = build_batch([Record(0, T0, struct.pack(">hh", 0, 2), b"\x00\x00")], is_control=True)
    path = tmp_path / f"{SEG0}.log"
    path.write_bytes(batch)
    code, out, _ = run_in_process([path])
    assert code == 0
    (record,) = record_lines(out)
    assert record.endswith("headerKeys: [] controlType: LEADER_CHANGE(2)")


def test_a_closed_pipe_ends_the_dump_quietly(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    log.append_as_leader(simple_batch([(b"k", b"x" * 200)] * 3000, timestamp=T0), 0)
    log.close()
    proc = subprocess.Popen([str(LAKELOG), "dump-log", "--print-data-log", str(tmp_path / "t-0" / f"{SEG0}.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"Dumping ")
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert stderr == b""


def test_txnindex_and_control_records_of_a_transactional_log(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    now = int(time.time() * 1000)  # the marker is stamped now: no time-based roll between them
    txn = build_batch([Record(0, now, b"k", b"v")], producer_id=4, producer_epoch=1, base_sequence=0,
                      is_transactional=True)
    log.append_as_leader(txn, 0)                  # 0
    log.append_control(4, 1, False, 6, 0)         # 1: ABORT
    log.append_as_leader(simple_batch([(b"k", b"p")], timestamp=now), 0)  # 2
    log.close()
    segment = tmp_path / "t-0" / f"{SEG0}.log"
    txnindex = segment.with_suffix(".txnindex")
    res = dump(txnindex, segment)
    assert res.returncode == 0, res.stderr
    out = lines(res.stdout)
    assert out[:2] == [f"Dumping {txnindex}",
                       "version: 0 producerId: 4 firstOffset: 0 lastOffset: 1 lastStableOffset: 2"]
    assert any("isControl: true" in line and "isTransactional: true" in line for line in out)
    assert any(line.endswith("endTxnMarker: ABORT coordinatorEpoch: 6") for line in out)
    # Damage is reported after the entries, never fatal.
    txnindex.write_bytes(txnindex.read_bytes() + struct.pack(">hqqqq", 3, 4, 9, 7, 8)[:30])
    code, text, _ = run_in_process([txnindex])
    assert code == 0 and "Torn entry: the last 30 bytes are not a whole 34-byte entry" in text
    txnindex.write_bytes(struct.pack(">hqqqq", 1, 4, 5, 0, 2))
    code, text, _ = run_in_process([txnindex])
    assert "Unknown version" in text and "above its lastOffset" in text
