package lakelog.spark;

import java.io.Serializable;
import java.util.TreeSet;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The data source's options, parsed and bounded as spark_log/datasource.py does (the same names;
 * Spark's option keys are case-insensitive): `remote` (else $LAKELOG_REMOTE), `topic`,
 * `partitions`, `startingOffset` / `endingOffset`, `startingTimestamp` / `endingTimestamp`
 * (inclusive, ms), `chunkBytes` (read buffer, 64 KiB..256 MiB, default 8 MiB), `maxPartitionBytes`
 * (segments read by one task, 1..1 TiB), `arrowBatchRows` (rows per columnar batch, 1..1,048,576;
 * the JVM reader's default is 4,096 as Spark's Parquet reader), `prefetchChunks` (read chunks a
 * task's read-ahead threads may hold ahead of its decoder, per thread, 0..64, default 0),
 * `prefetchSegments` (segments a task reads at once ahead of its decoder, one thread each, 0..16,
 * default 0; either option above 0 turns reading ahead on, see {@link Prefetcher}), `countFromManifest` (true by default: `count()` adds up the record counts
 * the manifests hold, see {@link CountReader}), `planningThreads` (manifests read at once while
 * planning, 1..64, default 8, see {@link Planner}), `minSplitBytes` (the least `.log` bytes of one
 * part of a segment cut across tasks, 64 KiB..1 TiB, default 4 MiB; at most
 * {@link #MAX_PARTS_PER_SEGMENT} parts a segment, see {@link Planner#cut}), `nodes` (the hot tail),
 * `isolation` (`read_committed`, the default: aborted transactions left out, the hot tail read up to
 * the last stable offset; `read_uncommitted`: every data record up to the high watermark; control
 * records are never rows; logstore/read_committed.py's names and rules).
 */
final class Options implements Serializable, Cloneable {
    private static final long serialVersionUID = 1L;
    static final int DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024;
    static final long DEFAULT_MAX_PARTITION_BYTES = 128L * 1024 * 1024;
    static final int DEFAULT_BATCH_ROWS = 4096;
    // 0: inline. Reading ahead measured no steady gain on 2 shared CPUs (docs/benchmarks.md, issue 14).
    static final int DEFAULT_PREFETCH_CHUNKS = 0;
    static final int DEFAULT_PREFETCH_SEGMENTS = 0;
    // the partitions' manifests read at once while planning (one GET each on S3, in the driver)
    static final int DEFAULT_PLANNING_THREADS = 8;
    // a segment larger than the group size is cut into parts no smaller than this (the floor of
    // the default group size too: below a few MiB a task's fixed costs outweigh its bytes)
    static final long DEFAULT_MIN_SPLIT_BYTES = 4L * 1024 * 1024;
    static final int MAX_PARTS_PER_SEGMENT = 1024;

    final String remote;
    final String topic;
    final String nodes;
    final String apiKey, user, password;
    final int chunkBytes;
    final long maxPartitionBytes;
    final boolean maxPartitionBytesGiven;
    final int batchRows;
    final int prefetchChunks;
    final int prefetchSegments;
    final boolean countFromManifest;
    final int planningThreads;
    final long minSplitBytes;
    /** Isolation `read_committed` (else `read_uncommitted`). */
    final boolean readCommitted;
    /** Inclusive bounds (Long.MIN_VALUE / MAX_VALUE: none) and the partitions wanted (null: all). */
    long offsetLow = Long.MIN_VALUE, offsetHigh = Long.MAX_VALUE;
    long timestampLow = Long.MIN_VALUE, timestampHigh = Long.MAX_VALUE;
    TreeSet<Integer> partitions;

    Options(CaseInsensitiveStringMap o) {
        String r = o.get("remote");
        remote = r != null && !r.isEmpty() ? r : System.getenv("LAKELOG_REMOTE");
        topic = o.get("topic");
        if (remote == null || remote.isEmpty()) {
            throw new IllegalArgumentException("the lakelog data source needs option('remote', URL) (or LAKELOG_REMOTE)");
        }
        if (topic == null || topic.isEmpty()) {
            throw new IllegalArgumentException("the lakelog data source needs option('topic', NAME)");
        }
        if (o.containsKey("valueFormat") || o.containsKey("keyFormat")) {
            // decoded by Lakelog's Python DataFrameReader wrapper (spark_log/decoded_read.py), which
            // removes these options before the scan: reaching here, they would be silently ignored
            throw new IllegalArgumentException("option valueFormat / keyFormat of the lakelog data source is applied "
                + "by Lakelog's DataFrameReader wrapper: call lakelog.spark_log.datasource.register(spark) first "
                + "(a Spark Connect client: query the typed lakelog.<topic> views)");
        }
        nodes = emptyToNull(o.get("nodes"));
        apiKey = firstOf(o.get("apiKey"), System.getenv("LAKELOG_API_KEY"));
        user = firstOf(o.get("user"), System.getenv("LAKELOG_USER"));
        password = firstOf(o.get("password"), System.getenv("LAKELOG_PASSWORD"));
        chunkBytes = (int) bounded(o, "chunkBytes", DEFAULT_CHUNK_BYTES, 64 * 1024, 256L * 1024 * 1024);
        maxPartitionBytesGiven = o.containsKey("maxPartitionBytes");
        maxPartitionBytes = bounded(o, "maxPartitionBytes", DEFAULT_MAX_PARTITION_BYTES, 1, 1L << 40);
        batchRows = (int) bounded(o, "arrowBatchRows", DEFAULT_BATCH_ROWS, 1, 1 << 20);
        prefetchChunks = (int) bounded(o, "prefetchChunks", DEFAULT_PREFETCH_CHUNKS, 0, 64);
        prefetchSegments = (int) bounded(o, "prefetchSegments", DEFAULT_PREFETCH_SEGMENTS, 0, 16);
        planningThreads = (int) bounded(o, "planningThreads", DEFAULT_PLANNING_THREADS, 1, 64);
        minSplitBytes = bounded(o, "minSplitBytes", DEFAULT_MIN_SPLIT_BYTES, 64 * 1024, 1L << 40);
        String cm = o.getOrDefault("countFromManifest", "true").trim();
        if (!cm.equalsIgnoreCase("true") && !cm.equalsIgnoreCase("false")) {
            throw new IllegalArgumentException("countFromManifest must be true or false");
        }
        countFromManifest = Boolean.parseBoolean(cm);
        String isolation = o.getOrDefault("isolation", "read_committed").trim().toLowerCase(java.util.Locale.ROOT);
        if (!isolation.equals("read_committed") && !isolation.equals("read_uncommitted")) {
            throw new IllegalArgumentException("option isolation must be one of read_committed, read_uncommitted, not '"
                                               + isolation + "'");
        }
        readCommitted = isolation.equals("read_committed");
        String ps = o.get("partitions");
        if (ps != null && !ps.isEmpty()) {
            partitions = new TreeSet<>();
            for (String p : ps.split(",")) {
                if (!p.trim().isEmpty()) {
                    partitions.add(Integer.parseInt(p.trim()));
                }
            }
        }
        if (o.containsKey("startingOffset")) {
            offsetLow = Long.parseLong(o.get("startingOffset").trim());
        }
        if (o.containsKey("endingOffset")) {
            offsetHigh = Long.parseLong(o.get("endingOffset").trim());
        }
        if (o.containsKey("startingTimestamp")) {
            timestampLow = Long.parseLong(o.get("startingTimestamp").trim());
        }
        if (o.containsKey("endingTimestamp")) {
            timestampHigh = Long.parseLong(o.get("endingTimestamp").trim());
        }
    }

    /** A copy to narrow with pushed filters (the DataFrame's own options never change). */
    Options copy() {
        try {
            Options c = (Options) super.clone();
            c.partitions = partitions == null ? null : new TreeSet<>(partitions);
            return c;
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);
        }
    }

    private static long bounded(CaseInsensitiveStringMap o, String name, long dflt, long low, long high) {
        String v = o.get(name);
        long x = v == null ? dflt : Long.parseLong(v.trim());
        if (x < low || x > high) {
            throw new IllegalArgumentException(name + " must lie between " + low + " and " + high);
        }
        return x;
    }

    private static String emptyToNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }

    private static String firstOf(String a, String b) {
        return a != null && !a.isEmpty() ? a : (b != null && !b.isEmpty() ? b : null);
    }

    boolean admitsPartition(int p) {
        return partitions == null || partitions.contains(p);
    }
}
