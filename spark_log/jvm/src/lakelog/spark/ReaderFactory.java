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
    private final boolean count;  // count() pushed: one row of the split's row count (CountReader)

    ReaderFactory(StructType schema, Options options, Broadcast<SerializableConfiguration> conf) {
        this(schema, options, conf, false);
    }

    ReaderFactory(StructType schema, Options options, Broadcast<SerializableConfiguration> conf, boolean count) {
        this.schema = schema;
        this.options = options;
        this.conf = conf;
        this.count = count;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return !count;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        if (count) {
            return new CountReader((Split) partition, options, conf);
        }
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
        private Prefetcher prefetch;    // with prefetchSegments or prefetchChunks > 0: objects read ahead
        private byte[] spare;           // the last scanner's read buffer, for the next one
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
            if (tier == null) {
                tier = new RemoteTier(options.remote, conf.value().value());
            }
            int index = next++;
            part = split.parts.get(index);
            Manifest.Segment s = part.segment;
            String key = RemoteTier.segmentKey(options.topic, part.partition, s, ".log");
            long from, end;
            if (options.prefetchSegments > 0 || options.prefetchChunks > 0) {
                if (prefetch == null) {
                    prefetch = new Prefetcher(options.topic, split.parts.size(), Math.max(1, options.prefetchSegments),
                                              Math.max(1, options.prefetchChunks), options.chunkBytes, this::openPart);
                }
                Prefetcher.Segment segment = prefetch.next();
                if (segment == null || segment.index != index) {
                    throw new IllegalStateException("prefetch out of order at segment " + index);
                }
                in = segment;
                from = segment.from;
                end = segment.size;
            } else {
                Prefetcher.Opened o = openPart(index);
                in = o.in;
                from = o.from;
                end = o.size;
            }
            scanner = new SegmentScanner(key, in, from, end, s.baseOffset, s.endOffset, part.from, part.to,
                                         part.minTs, part.maxTs, options.chunkBytes, spare).leavingOut(part.aborted);
            return true;
        }

        /** Part `index` of the split: the bytes of its `.log` object that hold its offsets, from
         *  the offset index's floor entry of its first offset to the entry past its last offset's
         *  batch ({@link RemoteTier#byteRange}; the whole object for a part that is a whole
         *  segment). A batch across a part's boundary is read by both parts' tasks, each keeping
         *  only its own offsets. */
        private Prefetcher.Opened openPart(int index) throws IOException {
            Split.Part p = split.parts.get(index);
            Manifest.Segment s = p.segment;
            String key = RemoteTier.segmentKey(options.topic, p.partition, s, ".log");
            long[] range = tier.byteRange(options.topic, p.partition, s, p.from, p.to);
            return new Prefetcher.Opened(tier.openLog(key, range[0], range[1]), range[0], range[1]);
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
                    spare = scanner.buffer();
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
                if (prefetch != null) {
                    prefetch.close();  // first: a segment stream closed after it does not wait for the rest
                }
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
