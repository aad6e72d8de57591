package lakelog.spark;

import java.io.IOException;
import java.io.InputStream;
import java.math.BigInteger;
import java.util.zip.CRC32C;

/**
 * Kafka RecordBatch v2 bytes of one remote `.log` object (or of one fetch response) into column
 * vectors, with the checks of the Python reference (tiering/remote_scan.py, logstore/record_batch.py)
 * and of the native decoder (logstore/_arrowscan.c), in the same order:
 *
 * <pre>
 * batch: 0 base offset i64 | 8 length i32 | 12 partition leader epoch i32 | 16 magic i8 (= 2)
 *        | 17 crc u32 (CRC-32C of bytes 21..end) | 21 attributes i16 (bits 0-2 codec, 3
 *        LogAppendTime, 5 control) | 23 last offset delta i32 | 27 base timestamp i64 | 35 max
 *        timestamp i64 | 43 producer id i64 | 51 producer epoch i16 | 53 base sequence i32 | 57
 *        record count i32 | 61 records (one compressed block when the codec is not none)
 * record: length varint | attributes i8 | timestamp delta varlong | offset delta varint | key
 *        length varint (-1 null) | key | value length varint | value | header count varint |
 *        (key length varint | key | value length varint | value)*
 * </pre>
 *
 * Per batch: framing (length at least 49), offsets inside the segment and above the previous
 * batch (the base offset is outside the CRC), magic, CRC-32C ({@link CRC32C}), then the batches
 * of the aborted transactions given ({@link #leavingOut}; read_committed) and control batches
 * (transaction markers) skipped, the codec inflated, every record walked and checked (lengths, increasing
 * offset deltas, timestamps whose microseconds fit an int64, no bytes left over) before any row
 * of it is used. Any failure throws {@link RemoteCorruptionException} naming the object and the
 * batch's position. Not thread-safe: one per reader.
 */
final class SegmentScanner {
    static final int HEADER_SIZE = 61;
    static final int LOG_OVERHEAD = 12;
    static final int MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024;
    static final long MAX_TIMESTAMP_MS = Long.MAX_VALUE / 1000;
    private static final long READ_LIMIT = 64L * 1024 * 1024;

    private final String key;
    private final InputStream in;
    private final long size;        // bytes of the object to read (the manifest's size)
    private final long lo, hi, minTs, maxTs, segmentEnd;
    private final int chunkBytes;
    private final CRC32C crc = new CRC32C();
    private AbortedTransactions tracker;   // null: nothing to leave out
    private long prevLast;
    private byte[] buf;
    private long bufPos;            // object position of buf[0]
    private int start, end;         // unconsumed bytes buf[start, end)
    private long read;              // object position read up to
    private boolean done;

    // the batch being decoded
    private long baseOffset, baseTimestamp, maxTimestamp, producerId;
    private int leaderEpoch, lastOffsetDelta, count;
    private boolean logAppend;
    private int p;                  // cursor in the records

    /**
     * @param from object position to start at (the offset index's floor entry, 0 for the whole object)
     * @param segmentBase, segmentEnd the offsets the manifest entry covers (batches must lie inside)
     */
    SegmentScanner(String key, InputStream in, long from, long size, long segmentBase, long segmentEnd, long lo, long hi,
                   long minTs, long maxTs, int chunkBytes) {
        this(key, in, from, size, segmentBase, segmentEnd, lo, hi, minTs, maxTs, chunkBytes, null);
    }

    /** @param spare a read buffer left by the previous scanner of the same reader ({@link #buffer()}),
     *  reused when it is large enough: one buffer per task, not one per segment (a 4-8 MiB array
     *  per segment is a humongous allocation for G1 and cost a GC every few segments). */
    SegmentScanner(String key, InputStream in, long from, long size, long segmentBase, long segmentEnd, long lo, long hi,
                   long minTs, long maxTs, int chunkBytes, byte[] spare) {
        this.key = key;
        this.in = in;
        this.size = size;
        this.segmentEnd = segmentEnd;
        this.prevLast = segmentBase == Long.MIN_VALUE ? Long.MIN_VALUE : segmentBase - 1;
        this.lo = lo;
        this.hi = hi;
        this.minTs = minTs;
        this.maxTs = maxTs;
        this.chunkBytes = chunkBytes;
        int want = (int) Math.max(LOG_OVERHEAD, Math.min(chunkBytes, Math.max(size - from, 0)));
        this.buf = spare != null && spare.length >= want ? spare : new byte[want];
        this.bufPos = from;
        this.read = from;
        this.done = from >= size;
    }

    /** Leave out the batches of the aborted transactions `aborted` lists (those overlapping the
     *  read, any order; read_committed): see {@link AbortedTransactions}. */
    SegmentScanner leavingOut(Aborted[] aborted) {
        tracker = aborted.length == 0 ? null : new AbortedTransactions(aborted);
        return this;
    }

    /** The type of a control batch's marker (its first record's key: version i16, type i16). */
    private int markerType(byte[] b, int at, int batchSize, int codec, long position) {
        byte[] r = b;
        int q = at + HEADER_SIZE, limit = at + batchSize;
        if (codec != 0) {
            try {
                r = Codecs.decompress(codec, b, at + HEADER_SIZE, batchSize - HEADER_SIZE, MAX_UNCOMPRESSED_BYTES);
            } catch (IOException e) {
                throw corrupt(position, e.getMessage());
            }
            q = 0;
            limit = r.length;
        }
        p = q;
        varintLong(r, limit, position);              // record length
        p++;                                         // attributes
        timestamp(r, limit, position);               // timestamp delta
        varintLong(r, limit, position);              // offset delta
        long keyLength = varintLong(r, limit, position);
        if (keyLength < 4 || p + 4 > limit) {
            throw corrupt(position, "control batch without a marker key");
        }
        return ((r[p + 2] & 0xFF) << 8) | (r[p + 3] & 0xFF);
    }

    /** The read buffer, for the next scanner of the same reader once this one is done. */
    byte[] buffer() {
        return buf;
    }

    /** The last offset of the last batch framed so far (Long.MIN_VALUE before the first). */
    long lastOffset() {
        return prevLast;
    }

    RemoteCorruptionException corrupt(long position, String message) {
        return new RemoteCorruptionException(key, position, key + ": " + message);
    }

    /** Make at least `need` bytes available from `start` (false: the object ended first). */
    private boolean available(int need) throws IOException {
        if (end - start >= need) {
            return true;
        }
        if (read >= size) {
            return false;
        }
        if (need > buf.length || start > 0) {
            if (need > buf.length) {
                if (need > Math.max(chunkBytes, READ_LIMIT) + LOG_OVERHEAD) {
                    throw corrupt(bufPos + start, "a batch larger than the read limit at " + (bufPos + start));
                }
                byte[] grown = new byte[(int) Math.min(Math.max(need, (long) buf.length * 2),
                                                       Math.max(chunkBytes, READ_LIMIT) + LOG_OVERHEAD)];
                System.arraycopy(buf, start, grown, 0, end - start);
                buf = grown;
            } else {
                System.arraycopy(buf, start, buf, 0, end - start);
            }
            bufPos += start;
            end -= start;
            start = 0;
        }
        while (end - start < need && read < size) {
            int want = (int) Math.min(buf.length - end, size - read);
            int n = in.read(buf, end, want);
            if (n < 0) {
                throw corrupt(read, "is shorter than the " + size + " bytes the manifest says");
            }
            end += n;
            read += n;
        }
        return end - start >= need;
    }

    /**
     * Decode wanted rows into `cols` until it holds at least `targetRows` rows or the object
     * ends; false once nothing more is wanted from this object.
     */
    boolean fill(Columns cols, int targetRows) throws IOException {
        while (!done && cols.rows < targetRows) {
            if (!available(LOG_OVERHEAD)) {
                if (end > start) {
                    throw corrupt(bufPos + start, "torn batch at the end");
                }
                done = true;
                break;
            }
            long position = bufPos + start;
            int length = Codecs.be32(buf, start + 8);
            if (length < HEADER_SIZE - LOG_OVERHEAD) {
                throw corrupt(position, "batch length " + length + " is impossible");
            }
            if ((long) length + LOG_OVERHEAD > Math.max(chunkBytes, READ_LIMIT) + LOG_OVERHEAD) {
                if (size - position < (long) length + LOG_OVERHEAD) {
                    throw corrupt(position, "torn batch at the end");
                }
                throw corrupt(position, "a batch larger than the read limit at " + position);
            }
            int batchSize = length + LOG_OVERHEAD;
            if (!available(batchSize)) {
                throw corrupt(bufPos + start, "torn batch at the end");
            }
            int at = start;
            start += batchSize;
            batch(cols, at, batchSize, bufPos + at);
        }
        return !done;
    }

    private void batch(Columns cols, int at, int batchSize, long position) throws IOException {
        byte[] b = buf;
        baseOffset = be64(b, at);
        lastOffsetDelta = Codecs.be32(b, at + 23);
        long last = baseOffset + lastOffsetDelta;
        if (((baseOffset ^ last) & (lastOffsetDelta ^ last)) < 0) {  // saturate, as Python's ints do not wrap
            last = lastOffsetDelta > 0 ? Long.MAX_VALUE : Long.MIN_VALUE;
        }
        if (baseOffset <= prevLast || last > segmentEnd || lastOffsetDelta < 0) {
            throw corrupt(position, "batch [" + baseOffset + ", " + last + "] does not follow offset " + prevLast
                                    + " inside the segment (ends at " + segmentEnd + ")");
        }
        prevLast = last;
        if (last < lo) {
            return;
        }
        if (b[at + 16] != 2) {
            throw corrupt(position, "batch has magic " + b[at + 16] + ", expected 2");
        }
        crc.reset();
        crc.update(b, at + 21, batchSize - 21);
        long actual = crc.getValue();
        long stored = Codecs.be32(b, at + 17) & 0xFFFFFFFFL;
        if (actual != stored) {
            throw corrupt(position, String.format("batch CRC-32C is %#010x, header says %#010x", actual, stored));
        }
        if (baseOffset > hi) {
            done = true;
            return;
        }
        int attributes = ((b[at + 21] & 0xFF) << 8) | (b[at + 22] & 0xFF);
        if (tracker != null && tracker.isAborted(baseOffset, last, be64(b, at + 43), (attributes & 0x10) != 0,
                                                 (attributes & 0x20) != 0,
                                                 () -> markerType(b, at, batchSize, attributes & 0x07, position))) {
            return;
        }
        maxTimestamp = be64(b, at + 35);
        if ((attributes & 0x20) != 0 || maxTimestamp < minTs) {  // a control batch, or all too old
            return;
        }
        leaderEpoch = Codecs.be32(b, at + 12);
        baseTimestamp = be64(b, at + 27);
        producerId = be64(b, at + 43);
        count = Codecs.be32(b, at + 57);
        logAppend = (attributes & 0x08) != 0;
        int codec = attributes & 0x07;
        if (codec == 0) {
            records(cols, b, at + HEADER_SIZE, at + batchSize, position);
        } else {
            byte[] inflated;
            try {
                inflated = Codecs.decompress(codec, b, at + HEADER_SIZE, batchSize - HEADER_SIZE, MAX_UNCOMPRESSED_BYTES);
            } catch (IOException e) {
                throw corrupt(position, e.getMessage());
            }
            records(cols, inflated, 0, inflated.length, position);
        }
    }

    private RemoteCorruptionException bad(long position, String message) {
        return corrupt(position, message);
    }

    /** A 5-byte varint as an exact long (it may exceed an int when malformed). */
    private long varintLong(byte[] b, int limit, long position) {
        long result = 0;
        int shift = 0;
        for (int i = 0; i < 5; i++) {
            if (p >= limit) {
                throw bad(position, "malformed record: varint runs past its record or is too long");
            }
            int x = b[p++];
            result |= (long) (x & 0x7F) << shift;
            if (x >= 0) {
                return zigzag(result);
            }
            shift += 7;
        }
        throw bad(position, "malformed record: varint runs past its record or is too long");
    }

    private static long zigzag(long v) {
        return (v >>> 1) ^ -(v & 1);
    }

    /** The record timestamp: exact over the 10 bytes (70 bits) the reference reads, or a
     *  sentinel outside the valid range when it cannot be a timestamp. */
    private long timestamp(byte[] b, int limit, long position) {
        long result = 0;
        int shift = 0;
        for (int i = 0; i < 10; i++) {
            if (p >= limit) {
                throw bad(position, "malformed record: varint runs past its record or is too long");
            }
            int x = b[p++];
            if (i == 9) {  // 70 bits: only BigInteger holds them
                BigInteger raw = BigInteger.valueOf(result & Long.MAX_VALUE)
                    .or(BigInteger.valueOf(result < 0 ? 1 : 0).shiftLeft(63))
                    .or(BigInteger.valueOf(x & 0x7F).shiftLeft(63));
                if (x < 0) {
                    throw bad(position, "malformed record: varint runs past its record or is too long");
                }
                BigInteger delta = raw.testBit(0) ? raw.shiftRight(1).negate().subtract(BigInteger.ONE) : raw.shiftRight(1);
                BigInteger ts = BigInteger.valueOf(baseTimestamp).add(delta);
                return ts.abs().compareTo(BigInteger.valueOf(MAX_TIMESTAMP_MS)) > 0 ? Long.MIN_VALUE : ts.longValue();
            }
            result |= (long) (x & 0x7F) << shift;
            if (x >= 0) {
                long delta = zigzag(result);  // up to 63 bits: exact
                long ts = baseTimestamp + delta;
                if (((baseTimestamp ^ ts) & (delta ^ ts)) < 0) {
                    return Long.MIN_VALUE;
                }
                return ts;
            }
            shift += 7;
        }
        throw bad(position, "malformed record: varint runs past its record or is too long");
    }

    private void records(Columns cols, byte[] b, int from, int end, long position) {
        p = from;
        long prevDelta = -1;
        // Room for every record of the batch (a count larger than the bytes can hold fails below).
        cols.reserve((int) Math.min(Math.max(count, 0), (end - from) / 7 + 1));
        final boolean wantOffset = cols.offset != null, wantTs = cols.timestamp != null,
            wantType = cols.timestampType != null, wantKey = cols.key != null, wantValue = cols.value != null,
            wantHeaders = cols.headers != null, wantEpoch = cols.leaderEpoch != null, wantPid = cols.producerId != null;
        for (int i = 0; i < count; i++) {
            long length = varintLong(b, end, position);
            long recEndL = p + length;
            if (length < 6 || recEndL > end) {
                throw bad(position, "record " + i + " length " + length + " is impossible");
            }
            int recEnd = (int) recEndL;
            p += 1;  // attributes
            long ts = timestamp(b, recEnd, position);
            long offDelta = varintLong(b, recEnd, position);
            if (offDelta <= prevDelta || offDelta > lastOffsetDelta) {
                throw bad(position, "record " + i + " offset delta " + offDelta + " is not increasing within 0.."
                                    + lastOffsetDelta);
            }
            prevDelta = offDelta;
            long klen = varintLong(b, recEnd, position);
            if (klen < -1 || p + Math.max(klen, 0) > recEnd) {
                throw bad(position, "record " + i + " key length " + klen + " is impossible");
            }
            int keyAt = p;
            if (klen > 0) {
                p += (int) klen;
            }
            long vlen = varintLong(b, recEnd, position);
            if (vlen < -1 || p + Math.max(vlen, 0) > recEnd) {
                throw bad(position, "record " + i + " value length " + vlen + " is impossible");
            }
            int valueAt = p;
            if (vlen > 0) {
                p += (int) vlen;
            }
            long nheaders = varintLong(b, recEnd, position);
            if (nheaders < 0 || nheaders > length) {
                throw bad(position, "record " + i + " header count " + nheaders + " is impossible");
            }
            int headersAt = p;
            for (long k = 0; k < nheaders; k++) {
                long hk = varintLong(b, recEnd, position);
                if (hk < 0 || p + hk > recEnd) {
                    throw bad(position, "record " + i + " header key length " + hk + " is impossible");
                }
                p += (int) hk;
                long hv = varintLong(b, recEnd, position);
                if (hv < -1 || p + Math.max(hv, 0) > recEnd) {
                    throw bad(position, "record " + i + " header value length " + hv + " is impossible");
                }
                if (hv > 0) {
                    p += (int) hv;
                }
            }
            if (p != recEnd) {
                throw bad(position, "record " + i + " length " + length + " does not match its fields");
            }
            long offset = baseOffset + offDelta;
            if (logAppend) {
                ts = maxTimestamp;
            }
            if (ts > MAX_TIMESTAMP_MS || ts < -MAX_TIMESTAMP_MS) {
                throw bad(position, "record " + i + " timestamp is out of range");
            }
            if (offset < lo || offset > hi || ts < minTs || ts > maxTs) {
                continue;
            }
            int row = cols.rows;
            if (wantOffset) {
                cols.offset.putLong(row, offset);
            }
            if (wantTs) {
                cols.timestamp.putLong(row, ts * 1000);
            }
            if (wantType) {
                cols.timestampType.putInt(row, logAppend ? 1 : 0);
            }
            if (wantKey) {
                if (klen < 0) {
                    cols.key.putNull(row);
                } else {
                    cols.key.putByteArray(row, b, keyAt, (int) klen);
                }
            }
            if (wantValue) {
                if (vlen < 0) {
                    cols.value.putNull(row);
                } else {
                    cols.value.putByteArray(row, b, valueAt, (int) vlen);
                }
            }
            if (wantHeaders) {
                int first = cols.headers.arrayData().getElementsAppended();
                int save = p;
                p = headersAt;
                for (long k = 0; k < nheaders; k++) {
                    int hk = (int) varintLong(b, recEnd, position);
                    int hkAt = p;
                    p += hk;
                    int hv = (int) varintLong(b, recEnd, position);
                    cols.header(b, hkAt, hk, p, hv);
                    if (hv > 0) {
                        p += hv;
                    }
                }
                p = save;
                cols.headers.putArray(row, first, (int) nheaders);
            }
            if (wantEpoch) {
                cols.leaderEpoch.putInt(row, leaderEpoch);
            }
            if (wantPid) {
                cols.producerId.putLong(row, producerId);
            }
            cols.rows++;
            if (cols.rows >= Integer.MAX_VALUE - 1) {
                throw new IllegalStateException("too many rows in one batch");
            }
        }
        if (p != end) {
            throw bad(position, (end - p) + " bytes follow the last of " + count + " records");
        }
    }

    static long be64(byte[] b, int p) {
        return ((long) Codecs.be32(b, p) << 32) | (Codecs.be32(b, p + 4) & 0xFFFFFFFFL);
    }
}
