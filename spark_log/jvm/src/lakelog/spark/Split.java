package lakelog.spark;

import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark input partition: consecutive remote segments or parts of one (up to maxPartitionBytes
 * of `.log`), each with the offsets and timestamps wanted from it; or one topic partition's hot
 * tail read from the nodes (`hot` set, no parts).
 */
final class Split implements InputPartition {
    private static final long serialVersionUID = 1L;

    /** The wanted rows of one segment: offsets [from, to], timestamps [minTs, maxTs] (inclusive);
     *  a segment cut across tasks is several parts with consecutive offset ranges. `aborted`: the
     *  aborted transactions overlapping [from, to] (read_committed), whose batches are left out. */
    static final class Part implements Serializable {
        private static final long serialVersionUID = 1L;
        final int partition;
        final Manifest.Segment segment;
        final long from, to, minTs, maxTs;
        final Aborted[] aborted;

        Part(int partition, Manifest.Segment segment, long from, long to, long minTs, long maxTs) {
            this(partition, segment, from, to, minTs, maxTs, Aborted.NONE);
        }

        Part(int partition, Manifest.Segment segment, long from, long to, long minTs, long maxTs, Aborted[] aborted) {
            this.partition = partition;
            this.segment = segment;
            this.from = from;
            this.to = to;
            this.minTs = minTs;
            this.maxTs = maxTs;
            this.aborted = aborted;
        }

        /** The same rows but offsets [from, to], with the aborted transactions overlapping them. */
        Part slice(long from, long to) {
            return new Part(partition, segment, from, to, minTs, maxTs, Aborted.overlapping(aborted, from, to));
        }
    }

    /** A topic partition's offsets from `from` up to `to` (inclusive) below the high watermark (with
     *  read_committed: the last stable offset) its task reads when it starts, fetched from the nodes. */
    static final class Hot implements Serializable {
        private static final long serialVersionUID = 1L;
        final int partition;
        final long from, to, minTs, maxTs;

        Hot(int partition, long from, long to, long minTs, long maxTs) {
            this.partition = partition;
            this.from = from;
            this.to = to;
            this.minTs = minTs;
            this.maxTs = maxTs;
        }
    }

    final List<Part> parts;
    final Hot hot;

    Split(List<Part> parts, Hot hot) {
        this.parts = parts;
        this.hot = hot;
    }
}
