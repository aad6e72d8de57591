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
 * the log start offset that can hold a wanted row becomes a {@link Split.Part}, and consecutive
 * parts are grouped into splits of at most the group size. With `nodes`, each topic partition also
 * gets a hot-tail split from one past its last remote offset.
 */
final class Planner {
    private Planner() {}

    static List<Split> plan(Options o, Configuration conf, int parallelism) throws IOException {
        try (RemoteTier tier = new RemoteTier(o.remote, conf)) {
            return plan(o, tier, parallelism);
        }
    }

    private static List<Split> plan(Options o, RemoteTier tier, int parallelism) throws IOException {
        List<Integer> live = o.nodes != null ? HotTail.partitionIds(o, o.topic) : null;
        SortedMap<Integer, Manifest> manifests = tier.manifests(
            o.topic, p -> o.admitsPartition(p) && (live == null || live.contains(p)), o.planningThreads);
        TreeSet<Integer> all = new TreeSet<>(manifests.keySet());
        if (live != null) {
            all.addAll(live);
        }
        List<Split.Part> parts = new ArrayList<>();
        List<Split> hot = new ArrayList<>();
        long total = 0;
        for (int p : all) {
            if (!o.admitsPartition(p) || (live != null && !live.contains(p))) {
                continue;
            }
            Long nextRemote = null;
            Manifest m = manifests.get(p);
            if (m != null) {
                for (Manifest.Segment s : m.readable(o.offsetLow, o.offsetHigh, o.timestampLow)) {
                    long start = Math.max(Math.max(s.baseOffset, m.logStartOffset), o.offsetLow == Long.MIN_VALUE ? 0 : o.offsetLow);
                    long end = Math.min(s.endOffset, o.offsetHigh);
                    if (start > end) {
                        continue;
                    }
                    parts.add(new Split.Part(p, s, start, end, o.timestampLow, o.timestampHigh));
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
            group = Math.min(group, Math.max(4L * 1024 * 1024, total / Math.max(1, parallelism)));
        }
        List<Split> out = new ArrayList<>();
        List<Split.Part> current = new ArrayList<>();
        long size = 0;
        for (Split.Part part : parts) {
            if (!current.isEmpty() && size + part.segment.sizeInBytes > group) {
                out.add(new Split(current, null));
                current = new ArrayList<>();
                size = 0;
            }
            current.add(part);
            size += part.segment.sizeInBytes;
        }
        if (!current.isEmpty()) {
            out.add(new Split(current, null));
        }
        out.addAll(hot);
        return out;
    }
}
