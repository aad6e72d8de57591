package lakelog.spark;

import java.io.IOException;
import java.io.InputStream;

import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/** Columnar readers in the executors: one {@link SegmentScanner} per segment of a split, in order. */
final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final StructType schema;
    private final Options options;
    private final Broadcast<SerializableConfiguration> conf;

    ReaderFactory(StructType schema, Options options, Broadcast<SerializableConfiguration> conf) {
        this.schema = schema;
        this.options = options;
        this.conf = conf;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        throw new UnsupportedOperationException("the lakelog reader is columnar");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new Reader((Split) partition);
    }

    private final class Reader implements PartitionReader<ColumnarBatch> {
        private final Split split;
        private final Columns cols;
        private RemoteTier tier;
        private int next;               // the next part of the split to open
        private Split.Part part;
        private InputStream in;
        private SegmentScanner scanner;
        private HotTail.Reader hot;
        private boolean hotDone;

        Reader(Split split) {
            this.split = split;
            this.cols = new Columns(schema, options.batchRows);
        }

        private boolean openNext() throws IOException {
            closeStream();
            if (next >= split.parts.size()) {
                return false;
            }
            part = split.parts.get(next++);
            if (tier == null) {
                tier = new RemoteTier(options.remote, conf.value().value());
            }
            Manifest.Segment s = part.segment;
            String key = RemoteTier.segmentKey(options.topic, part.partition, s, ".log");
            long from = tier.startPosition(options.topic, part.partition, s, part.from);
            in = tier.openLog(key, from, s.sizeInBytes);
            scanner = new SegmentScanner(key, in, from, s.sizeInBytes, s.baseOffset, s.endOffset, part.from, part.to,
                                         part.minTs, part.maxTs, options.chunkBytes);
            return true;
        }

        @Override
        public boolean next() throws IOException {
            if (split.hot != null) {
                return nextHot();
            }
            while (true) {
                if (scanner == null && !openNext()) {
                    return false;
                }
                cols.reset(options.topic, part.partition);
                boolean more = scanner.fill(cols, options.batchRows);
                if (!more) {
                    scanner = null;
                }
                if (cols.rows > 0) {
                    return true;
                }
            }
        }

        private boolean nextHot() throws IOException {
            if (hotDone) {
                return false;
            }
            if (hot == null) {
                hot = new HotTail(options).new Reader(split.hot);
            }
            cols.reset(options.topic, split.hot.partition);
            while (cols.rows == 0) {
                if (!hot.fill(cols, options.batchRows)) {
                    hotDone = true;
                    return cols.rows > 0;
                }
            }
            return true;
        }

        @Override
        public ColumnarBatch get() {
            return cols.finish();
        }

        private void closeStream() throws IOException {
            if (in != null) {
                InputStream s = in;
                in = null;
                s.close();
            }
        }

        @Override
        public void close() throws IOException {
            try {
                closeStream();
            } finally {
                try {
                    if (tier != null) {
                        tier.close();  // its own FileSystem (see RemoteTier)
                    }
                } finally {
                    cols.close();
                }
            }
        }
    }

}
