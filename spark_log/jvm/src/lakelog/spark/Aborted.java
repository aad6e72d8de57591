package lakelog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One aborted transaction as a `.txnindex` entry lists it (index/transaction_index.py): its
 * producer, its first offset in the partition and the offset of its ABORT marker. Decoded from
 * the remote tier's `.txnindex` objects (34-byte big-endian entries: version i16 = 0 | producer id
 * i64 | first offset i64 | last offset i64 | last stable offset i64), each object checked against
 * the manifest's size and CRC-32C and structurally (whole entries, version 0, a non-negative
 * producer, first <= last, the last offset inside the segment).
 */
final class Aborted implements Serializable {
    private static final long serialVersionUID = 1L;
    static final Aborted[] NONE = new Aborted[0];
    static final int ENTRY_BYTES = 34;

    final long producerId, firstOffset, lastOffset;

    Aborted(long producerId, long firstOffset, long lastOffset) {
        this.producerId = producerId;
        this.firstOffset = firstOffset;
        this.lastOffset = lastOffset;
    }

    /** The entries of `aborted` overlapping offsets [from, to] (inclusive). */
    static Aborted[] overlapping(Aborted[] aborted, long from, long to) {
        List<Aborted> out = new ArrayList<>();
        for (Aborted a : aborted) {
            if (a.lastOffset >= from && a.firstOffset <= to) {
                out.add(a);
            }
        }
        return out.isEmpty() ? NONE : out.toArray(NONE);
    }

    /** Whether a read of `m` from `from` can meet an aborted transaction the remote tier knows
     *  (a COPY_FINISHED segment ending at or after `from` has a `.txnindex` or `later_aborts`). */
    static boolean any(Manifest m, long from) {
        for (Manifest.Segment s : m.copyFinished()) {
            if ((s.txnIndexBytes > 0 || s.laterAborts.length > 0) && s.endOffset >= from) {
                return true;
            }
        }
        return false;
    }

    /** Every aborted transaction whose ABORT marker lies at or after `from` in the remote tier:
     *  the `.txnindex` objects of the COPY_FINISHED segments from there on, one GET each, and only
     *  when the manifest lists one (a partition without aborted transactions costs nothing). */
    static Aborted[] remote(RemoteTier tier, String topic, Manifest m, long from) throws IOException {
        // Keyed by (producer, first offset): a transaction listed by a segment's later_aborts is
        // listed again by the `.txnindex` of its marker's segment once that one is tiered too.
        Map<List<Long>, Aborted> out = new LinkedHashMap<>();
        for (Manifest.Segment s : m.copyFinished()) {
            if (s.endOffset < from) {
                continue;
            }
            for (Aborted a : s.laterAborts) {
                if (a.lastOffset >= from) {
                    out.putIfAbsent(List.of(a.producerId, a.firstOffset), a);
                }
            }
            if (s.txnIndexBytes == 0) {
                continue;
            }
            String key = RemoteTier.segmentKey(topic, m.partition, s, ".txnindex");
            for (Aborted a : decode(key, tier.checkedObject(key, s.txnIndexBytes, s.txnIndexCrc), s)) {
                if (a.lastOffset >= from) {
                    out.putIfAbsent(List.of(a.producerId, a.firstOffset), a);
                }
            }
        }
        return out.isEmpty() ? NONE : out.values().toArray(NONE);
    }

    static List<Aborted> decode(String key, byte[] data, Manifest.Segment s) {
        if (data.length % ENTRY_BYTES != 0) {
            throw new RemoteCorruptionException(key, -1, key + ": transaction index of " + data.length
                                                         + " bytes is not whole " + ENTRY_BYTES + "-byte entries");
        }
        List<Aborted> out = new ArrayList<>();
        for (int at = 0; at < data.length; at += ENTRY_BYTES) {
            int version = ((data[at] & 0xFF) << 8) | (data[at + 1] & 0xFF);
            long pid = SegmentScanner.be64(data, at + 2), first = SegmentScanner.be64(data, at + 10);
            long last = SegmentScanner.be64(data, at + 18);
            if (version != 0 || pid < 0 || first > last || last < s.baseOffset || last > s.endOffset) {
                throw new RemoteCorruptionException(key, at, key + ": transaction index entry at " + at
                    + " is impossible (version " + version + ", producer " + pid + ", offsets " + first + ".." + last
                    + " in a segment of " + s.baseOffset + ".." + s.endOffset + ")");
            }
            out.add(new Aborted(pid, first, last));
        }
        return out;
    }
}
