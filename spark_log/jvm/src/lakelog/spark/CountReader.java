package lakelog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/**
 * `count()` pushed into the scan (see {@link LakelogScanBuilder#pushAggregation}): one row per
 * split holding the number of rows the split would return; Spark adds the rows up.
 *
 * <p>A segment's rows are counted without reading it only when all of this holds: the manifest
 * entry has a record count (its writer's CRC-checked scan counted the records of the data batches;
 * entries written before the field existed have none), the split wants every offset of the
 * segment (its base is at or above the log start offset and no offset bound cuts it), and no
 * timestamp bound applies. Every other segment, and the hot tail, is read and its rows counted
 * by the columnar reader with no column, so the count is the one a full read gives. Like
 * Parquet's count from its footers, a segment counted from its manifest entry is not read, so
 * its bytes are not checked by that query; `countFromManifest=false` reads every byte.
 */
final class CountReader implements PartitionReader<InternalRow> {
    static final StructType SCHEMA = new StructType().add("count", DataTypes.LongType, false);

    private final Split split;
    private final Options options;
    private final Broadcast<SerializableConfiguration> conf;
    private long count = -1;
    private boolean returned;

    CountReader(Split split, Options options, Broadcast<SerializableConfiguration> conf) {
        this.split = split;
        this.options = options;
        this.conf = conf;
    }

    /** True when the manifest's record count is the number of rows `part` returns. */
    static boolean countedByManifest(Split.Part part) {
        Manifest.Segment s = part.segment;
        return s.recordCount >= 0 && part.from <= s.baseOffset && part.to >= s.endOffset
            && part.minTs == Long.MIN_VALUE && part.maxTs == Long.MAX_VALUE
            && part.aborted.length == 0;  // the writer counted aborted records too
    }

    @Override
    public boolean next() throws IOException {
        if (count < 0) {
            long n = 0;
            List<Split.Part> toRead = new ArrayList<>();
            for (Split.Part part : split.parts) {
                if (options.countFromManifest && countedByManifest(part)) {
                    n += part.segment.recordCount;
                } else {
                    toRead.add(part);
                }
            }
            if (!toRead.isEmpty()) {
                n += rowsOf(new Split(toRead, null));
            }
            if (split.hot != null) {
                n += rowsOf(new Split(List.of(), split.hot));
            }
            count = n;
        }
        if (returned) {
            return false;
        }
        returned = true;
        return true;
    }

    /** The rows of `s` as the columnar reader returns them, decoding no column. */
    private long rowsOf(Split s) throws IOException {
        long n = 0;
        try (PartitionReader<ColumnarBatch> r = new ReaderFactory(new StructType(), options, conf).createColumnarReader(s)) {
            while (r.next()) {
                n += r.get().numRows();
            }
        }
        return n;
    }

    @Override
    public InternalRow get() {
        return new GenericInternalRow(new Object[] {count});
    }

    @Override
    public void close() {
    }
}
