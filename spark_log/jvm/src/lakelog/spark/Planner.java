package lakelog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.SortedMap;
import java.util.TreeSet;

import org.apache.hadoop.conf.Configuration;

/**
 * Planning, in the driver, each time a query runs (so a view sees what was tiered since the last
 * query): one listing of the remote root, then each wanted partition's manifest read once, the
 * partitions' manifests in parallel on a pool of at most `planningThreads` threads that lives for
 * this planning (on S3: one LIST, then one GET per manifest and no HEAD, see
 * {@link RemoteTier#manifests}); every COPY_FINISHED segment at or above
 * the log start offset that can hold a wanted row becomes a {@link Split.Part} (with read_committed,
 * carrying the aborted transactions overlapping it, from the partition's `.txnindex` objects, read
 * only when its manifest lists one: {@link Aborted#remote}; a segment larger
 * than the group size becomes several, see {@link #cut}), and consecutive parts are grouped into
 * splits of at most the group size. With `nodes`, each topic partition also gets a hot-tail split
 * from one past its last remote offset.
 */
final class Planner {
    private Planner() {}

    /** @param count `count()` is pushed (a segment its manifest entry counts is never cut: its
     *  count costs no read, its parts' would, see {@link CountReader}) */
    static List<Split> plan(Options o, Configuration conf, int parallelism, boolean count) throws IOException {
        try (RemoteTier tier = new RemoteTier(o.remote, conf)) {
            return plan(o, tier, parallelism, count);
        }
    }

    private static List<Split> plan(Options o, RemoteTier tier, int parallelism, boolean count) throws IOException {
        List<Integer> live = o.nodes != null ? HotTail.partitionIds(o, o.topic) : null;
        SortedMap<Integer, Manifest> manifests = tier.manifests(
            o.topic, p -> o.admitsPartition(p) && (live == null || live.contains(p)), o.planningThreads);
        TreeSet<Integer> all = new TreeSet<>(manifests.keySet());
        if (live != null) {
            all.addAll(live);
        }
        List<Split.Part> wanted = new ArrayList<>();
        List<Split> hot = new ArrayList<>();
        long total = 0;
        for (int p : all) {
            if (!o.admitsPartition(p) || (live != null && !live.contains(p))) {
                continue;
            }
            Long nextRemote = null;
            Manifest m = manifests.get(p);
            if (m != null) {
                long from = Math.max(m.logStartOffset, o.offsetLow == Long.MIN_VALUE ? 0 : o.offsetLow);
                Aborted[] aborted = o.readCommitted && Aborted.any(m, from) ? Aborted.remote(tier, o.topic, m, from)
                                                                            : Aborted.NONE;
                for (Manifest.Segment s : m.readable(o.offsetLow, o.offsetHigh, o.timestampLow)) {
                    long start = Math.max(Math.max(s.baseOffset, m.logStartOffset), o.offsetLow == Long.MIN_VALUE ? 0 : o.offsetLow);
                    long end = Math.min(s.endOffset, o.offsetHigh);
                    if (start > end) {
                        continue;
                    }
                    wanted.add(new Split.Part(p, s, start, end, o.timestampLow, o.timestampHigh,
                                              Aborted.overlapping(aborted, start, end)));
                    total += s.sizeInBytes;
                }
                Long e = m.endOffset();
                if (e != null) {
                    nextRemote = e + 1;
                }
            }
            if (live != null) {
                long start = Math.max(nextRemote == null ? 0 : nextRemote, o.offsetLow == Long.MIN_VALUE ? 0 : o.offsetLow);
                if (start <= o.offsetHigh) {
                    hot.add(new Split(List.of(), new Split.Hot(p, start, o.offsetHigh, o.timestampLow, o.timestampHigh)));
                }
            }
        }
        // As Spark's file sources: at most maxPartitionBytes per task, and smaller groups when
        // that spreads the bytes over the cores (unless maxPartitionBytes was given).
        long group = o.maxPartitionBytes;
        if (!o.maxPartitionBytesGiven) {
            // rounded up: a segment of all the bytes is cut into `parallelism` parts, not one more
            group = Math.min(group, Math.max(4L * 1024 * 1024, ceilDiv(total, Math.max(1, parallelism))));
        }
        List<Split> out = new ArrayList<>();
        List<Split.Part> current = new ArrayList<>();
        long size = 0;
        for (Split.Part whole : wanted) {
            List<Split.Part> pieces = count && o.countFromManifest && CountReader.countedByManifest(whole)
                ? List.of(whole) : cut(whole, group, o.minSplitBytes);
            // a whole part weighs its segment's size, as before parts were cut; a piece its share
            long weight = pieces.size() == 1 ? whole.segment.sizeInBytes : ceilDiv(estimatedBytes(whole), pieces.size());
            for (Split.Part part : pieces) {
                if (!current.isEmpty() && size + weight > group) {
                    out.add(new Split(current, null));
                    current = new ArrayList<>();
                    size = 0;
                }
                current.add(part);
                size += weight;
            }
        }
        if (!current.isEmpty()) {
            out.add(new Split(current, null));
        }
        out.addAll(hot);
        return out;
    }

    /** The `.log` bytes that hold `part`'s offsets, estimated in proportion to its share of the
     *  segment's offsets (the manifest has no byte position per offset; an offset gap left by
     *  compaction counts as if it held records, so a part may hold few rows). */
    static long estimatedBytes(Split.Part part) {
        Manifest.Segment s = part.segment;
        double share = (double) (part.to - part.from + 1) / Math.max(1.0, (double) (s.endOffset - s.baseOffset + 1));
        return (long) Math.ceil(Math.min(1.0, share) * Math.max(0, s.sizeInBytes));
    }

    /**
     * `part` cut into consecutive offset ranges, together exactly its [from, to], each estimated at
     * most `group` bytes when the bounds below allow ({@link #estimatedBytes}); `part` itself when
     * it fits in one group. Bounds: no piece estimated below `minBytes`, at most
     * {@link Options#MAX_PARTS_PER_SEGMENT} pieces, at least one offset each. Each piece keeps the
     * part's timestamp bounds; its task reads the bytes its offsets need (the offset index's
     * floor entry of its first offset up to the entry past its last, {@link RemoteTier#byteRange}):
     * a batch across a cut is read by both tasks and each keeps only its own offsets.
     */
    static List<Split.Part> cut(Split.Part part, long group, long minBytes) {
        long bytes = estimatedBytes(part);
        long span = part.to - part.from + 1;
        if (bytes <= group || span <= 1) {
            return List.of(part);
        }
        long n = Math.min(Math.min(ceilDiv(bytes, Math.max(1, group)), bytes / Math.max(1, minBytes)),
                          Math.min(Options.MAX_PARTS_PER_SEGMENT, span));
        if (n <= 1) {
            return List.of(part);
        }
        List<Split.Part> out = new ArrayList<>((int) n);
        long step = span / n, extra = span % n, from = part.from;
        for (long i = 0; i < n; i++) {
            long to = from + step - 1 + (i < extra ? 1 : 0);
            out.add(part.slice(from, to));
            from = to + 1;
        }
        return out;
    }

    private static long ceilDiv(long a, long b) {
        return a / b + (a % b == 0 ? 0 : 1);
    }
}
