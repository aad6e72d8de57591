package lakelog.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32C;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * A partition manifest (`<topic>-<partition>/manifest.json`, format in tiering/manifest.py) as the
 * reader needs it: version 1, the CRC-32C of the canonical JSON of "manifest" checked, the log
 * start offset and the segments with their state, offsets, max timestamp, size, offset index
 * (bytes, CRC-32C), where the writer recorded them the record count and the `.txnindex` object
 * (bytes, CRC-32C).
 *
 * <p>The writer stores canonical JSON (keys sorted, no spaces, ASCII), so the "manifest" value is
 * the exact byte range between {@code {"crc32c":N,"manifest":} and {@code ,"version":1}}: the CRC
 * is checked over those bytes as stored. A manifest that is not canonical, has another version, a
 * CRC mismatch or a missing field is refused ({@link RemoteCorruptionException}).
 */
final class Manifest {
    static final int VERSION = 1;
    static final int COPY_FINISHED = 1;
    static final long NO_TIMESTAMP = -1;
    private static final ObjectMapper JSON = new ObjectMapper();

    /** One readable segment of a manifest. */
    static final class Segment implements Serializable {
        private static final long serialVersionUID = 1L;
        final String id;
        final long baseOffset, endOffset, maxTimestamp, sizeInBytes;
        final int state;
        final long indexBytes, indexCrc;
        /** The records of its data batches as its writer counted them; -1: not recorded. */
        final long recordCount;
        /** Its `.txnindex` object (the aborted transactions whose ABORT marker it holds); 0 / 0: none. */
        final long txnIndexBytes, txnIndexCrc;
        /** "later_aborts": the aborted transactions with data in it whose ABORT marker lies after it
         *  (maybe not tiered yet), as its uploader knew them; none when absent (older entries). */
        final Aborted[] laterAborts;

        Segment(String id, long baseOffset, long endOffset, long maxTimestamp, long sizeInBytes, int state,
                long indexBytes, long indexCrc, long recordCount, long txnIndexBytes, long txnIndexCrc,
                Aborted[] laterAborts) {
            this.id = id;
            this.baseOffset = baseOffset;
            this.endOffset = endOffset;
            this.maxTimestamp = maxTimestamp;
            this.sizeInBytes = sizeInBytes;
            this.state = state;
            this.indexBytes = indexBytes;
            this.indexCrc = indexCrc;
            this.recordCount = recordCount;
            this.txnIndexBytes = txnIndexBytes;
            this.txnIndexCrc = txnIndexCrc;
            this.laterAborts = laterAborts;
        }

        String stem() {
            return String.format("%020d-%s", baseOffset, id);
        }
    }

    final String topic;
    final int partition;
    final long logStartOffset;
    final List<Segment> segments;

    private Manifest(String topic, int partition, long logStartOffset, List<Segment> segments) {
        this.topic = topic;
        this.partition = partition;
        this.logStartOffset = logStartOffset;
        this.segments = segments;
    }

    /** COPY_FINISHED segments in offset order. */
    List<Segment> copyFinished() {
        List<Segment> out = new ArrayList<>();
        for (Segment s : segments) {
            if (s.state == COPY_FINISHED) {
                out.add(s);
            }
        }
        return out;
    }

    /** The last offset the remote tier holds, or null. */
    Long endOffset() {
        List<Segment> done = copyFinished();
        return done.isEmpty() ? null : done.get(done.size() - 1).endOffset;
    }

    /** remote_scan.readable_segments: COPY_FINISHED segments that may hold offsets in [from, to]
     *  (Long.MIN/MAX_VALUE: unbounded) at or after minTimestamp. */
    List<Segment> readable(long from, long to, long minTimestamp) {
        List<Segment> out = new ArrayList<>();
        for (Segment s : copyFinished()) {
            if (s.endOffset < logStartOffset || s.endOffset < from || s.baseOffset > to) {
                continue;
            }
            if (minTimestamp != Long.MIN_VALUE && s.maxTimestamp != NO_TIMESTAMP && s.maxTimestamp < minTimestamp) {
                continue;
            }
            out.add(s);
        }
        return out;
    }

    static Manifest parse(String key, byte[] raw) {
        String text = new String(raw, StandardCharsets.US_ASCII);
        String head = "{\"crc32c\":";
        String mid = ",\"manifest\":";
        String tail = ",\"version\":" + VERSION + "}";
        int midAt = text.indexOf(mid);
        if (!text.startsWith(head) || midAt < 0 || !text.endsWith(tail)) {
            if (text.contains("\"version\":") && !text.endsWith(tail)) {
                throw new RemoteCorruptionException(key, -1, key + ": not a version " + VERSION
                                                             + " manifest (or not in canonical form)");
            }
            throw new RemoteCorruptionException(key, -1, key + ": not a canonical manifest");
        }
        long stored;
        try {
            stored = Long.parseLong(text.substring(head.length(), midAt));
        } catch (NumberFormatException e) {
            throw new RemoteCorruptionException(key, -1, key + ": manifest CRC field is not a number");
        }
        int bodyFrom = midAt + mid.length();
        int bodyTo = raw.length - tail.length();
        CRC32C crc = new CRC32C();
        crc.update(raw, bodyFrom, bodyTo - bodyFrom);
        if (crc.getValue() != stored) {
            throw new RemoteCorruptionException(key, -1, String.format(
                "%s: manifest CRC-32C is %#010x, it says %#010x", key, crc.getValue(), stored));
        }
        try {
            JsonNode m = JSON.readTree(Arrays.copyOfRange(raw, bodyFrom, bodyTo));
            List<Segment> segments = new ArrayList<>();
            for (JsonNode s : need(m, "segments", key)) {
                JsonNode index = need(s, "index", key);
                JsonNode txn = s.get("txn_index");  // optional: written only for a segment with aborted transactions
                segments.add(new Segment(need(s, "id", key).asText(), need(s, "base_offset", key).asLong(),
                                         need(s, "end_offset", key).asLong(), need(s, "max_timestamp", key).asLong(),
                                         need(s, "size_in_bytes", key).asLong(), need(s, "state", key).asInt(),
                                         index.get(0).asLong(), index.get(1).asLong(), recordCount(s, key),
                                         txn == null ? 0 : txn.get(0).asLong(), txn == null ? 0 : txn.get(1).asLong(),
                                         laterAborts(s, key)));
            }
            return new Manifest(need(m, "topic", key).asText(), need(m, "partition", key).asInt(),
                                need(m, "log_start_offset", key).asLong(), segments);
        } catch (java.io.IOException | NullPointerException e) {
            throw new RemoteCorruptionException(key, -1, key + ": malformed manifest: " + e);
        }
    }

    /** The optional "later_aborts": [[producer id, first offset, last offset, last stable offset], ...]. */
    private static Aborted[] laterAborts(JsonNode s, String key) {
        JsonNode v = s.get("later_aborts");
        if (v == null || v.isEmpty()) {
            return Aborted.NONE;
        }
        if (!v.isArray()) {
            throw new RemoteCorruptionException(key, -1, key + ": later_aborts is not a list");
        }
        List<Aborted> out = new ArrayList<>();
        for (JsonNode e : v) {
            if (!e.isArray() || e.size() != 4 || !e.get(0).isIntegralNumber() || !e.get(1).isIntegralNumber()
                    || !e.get(2).isIntegralNumber() || !e.get(3).isIntegralNumber()
                    || e.get(0).asLong() < 0 || e.get(1).asLong() > e.get(2).asLong()) {
                throw new RemoteCorruptionException(key, -1, key + ": malformed later_aborts entry " + e);
            }
            out.add(new Aborted(e.get(0).asLong(), e.get(1).asLong(), e.get(2).asLong()));
        }
        return out.toArray(Aborted.NONE);
    }

    /** The optional "record_count" (-1 when absent: written before it existed). */
    private static long recordCount(JsonNode s, String key) {
        JsonNode v = s.get("record_count");
        if (v == null) {
            return -1;
        }
        if (!v.isIntegralNumber() || v.asLong() < 0) {
            throw new RemoteCorruptionException(key, -1, key + ": manifest field record_count is " + v);
        }
        return v.asLong();
    }

    private static JsonNode need(JsonNode node, String field, String key) {
        JsonNode v = node.get(field);
        if (v == null || v.isNull()) {
            throw new RemoteCorruptionException(key, -1, key + ": manifest field " + field + " is missing");
        }
        return v;
    }
}
