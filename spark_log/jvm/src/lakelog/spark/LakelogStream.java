package lakelog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.types.StructType;

/**
 * `spark.readStream.format("lakelog")`: micro-batches of what the remote tier gained, as the Python
 * stream reader: offsets are {"<partition>": next offset}; a batch reads, per partition, [start,
 * end) where end is one past the last COPY_FINISHED offset when it was planned; a partition that
 * appears later starts at its remote log start offset, and a start that retention overtook moves
 * up to the log start (as failOnDataLoss=false). One input partition per segment, or per part of
 * a segment larger than `maxPartitionBytes` ({@link Planner#cut}).
 */
final class LakelogStream implements MicroBatchStream {
    private static final ObjectMapper JSON = new ObjectMapper();
    private final StructType schema;
    private final Options options;

    LakelogStream(StructType schema, Options options) {
        this.schema = schema;
        this.options = options;
    }

    /** {"<partition>": next offset} */
    static final class PartitionOffsets extends Offset {
        final TreeMap<Integer, Long> next;

        PartitionOffsets(TreeMap<Integer, Long> next) {
            this.next = next;
        }

        @Override
        public String json() {
            Map<String, Long> out = new java.util.LinkedHashMap<>();
            for (Map.Entry<Integer, Long> e : next.entrySet()) {
                out.put(Integer.toString(e.getKey()), e.getValue());
            }
            try {
                return JSON.writeValueAsString(out);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** partition -> (remote log start offset, one past the remote end). */
    private TreeMap<Integer, long[]> ends() {
        try (RemoteTier tier = new RemoteTier(options.remote, LakelogScan.hadoopConf())) {
            TreeMap<Integer, long[]> out = new TreeMap<>();
            // as a batch query's planning: one listing, the manifests read in parallel (no HEAD on S3)
            tier.manifests(options.topic, options::admitsPartition, options.planningThreads).forEach((p, m) -> {
                Long end = m.endOffset();
                out.put(p, new long[] {m.logStartOffset, end == null ? m.logStartOffset : end + 1});
            });
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public Offset initialOffset() {
        TreeMap<Integer, Long> out = new TreeMap<>();
        ends().forEach((p, se) -> out.put(p, se[0]));
        return new PartitionOffsets(out);
    }

    @Override
    public Offset latestOffset() {
        TreeMap<Integer, Long> out = new TreeMap<>();
        ends().forEach((p, se) -> out.put(p, se[1]));
        return new PartitionOffsets(out);
    }

    @Override
    public Offset deserializeOffset(String json) {
        try {
            TreeMap<Integer, Long> out = new TreeMap<>();
            JsonNode n = JSON.readTree(json);
            Iterator<Map.Entry<String, JsonNode>> it = n.fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                out.put(Integer.parseInt(e.getKey()), e.getValue().asLong());
            }
            return new PartitionOffsets(out);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        TreeMap<Integer, Long> from = ((PartitionOffsets) (start instanceof PartitionOffsets ? start
            : deserializeOffset(start.json()))).next;
        TreeMap<Integer, Long> to = ((PartitionOffsets) (end instanceof PartitionOffsets ? end
            : deserializeOffset(end.json()))).next;
        try (RemoteTier tier = new RemoteTier(options.remote, LakelogScan.hadoopConf())) {
            List<InputPartition> out = new ArrayList<>();
            for (Map.Entry<Integer, Long> e : to.entrySet()) {
                int p = e.getKey();
                long stop = e.getValue();
                Manifest m = tier.manifest(options.topic, p);
                long first = Math.max(from.getOrDefault(p, m.logStartOffset), m.logStartOffset);
                if (first >= stop) {
                    continue;
                }
                Aborted[] aborted = options.readCommitted && Aborted.any(m, first)
                    ? Aborted.remote(tier, options.topic, m, first) : Aborted.NONE;
                for (Manifest.Segment s : m.readable(first, stop - 1, Long.MIN_VALUE)) {
                    long lo = Math.max(first, s.baseOffset), hi = Math.min(stop - 1, s.endOffset);
                    Split.Part part = new Split.Part(p, s, lo, hi, Long.MIN_VALUE, Long.MAX_VALUE,
                                                     Aborted.overlapping(aborted, lo, hi));
                    for (Split.Part piece : Planner.cut(part, options.maxPartitionBytes, options.minSplitBytes)) {
                        out.add(new Split(List.of(piece), null));
                    }
                }
            }
            return out.toArray(new InputPartition[0]);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory(schema, options, LakelogScan.broadcastConf(LakelogScan.hadoopConf()));
    }

    @Override
    public void commit(Offset end) {
        // nothing to release: the remote tier is read, never consumed
    }

    @Override
    public void stop() {
    }
}
