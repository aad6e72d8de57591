package lakelog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/** One query's scan: planned when Spark asks for its input partitions (see {@link Planner}). */
final class LakelogScan implements Scan, Batch {
    private final StructType schema;
    private final Options options;
    private final boolean count;  // count() pushed (LakelogScanBuilder#pushAggregation)
    private InputPartition[] planned;  // Spark may ask more than once per query: plan once

    LakelogScan(StructType schema, Options options) {
        this(schema, options, false);
    }

    LakelogScan(StructType schema, Options options, boolean count) {
        this.schema = count ? CountReader.SCHEMA : schema;
        this.options = options;
        this.count = count;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    @Override
    public String description() {
        return "lakelog topic " + options.topic + " at " + options.remote + (options.nodes != null ? " + nodes" : "")
            + " [partitions " + (options.partitions == null ? "all" : options.partitions) + ", offsets "
            + bound(options.offsetLow) + ".." + bound(options.offsetHigh) + ", timestamps " + bound(options.timestampLow)
            + ".." + bound(options.timestampHigh) + "]" + (count ? " count pushed" : "");
    }

    private static String bound(long v) {
        return v == Long.MIN_VALUE || v == Long.MAX_VALUE ? "*" : Long.toString(v);
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new LakelogStream(schema, options);
    }

    static Configuration hadoopConf() {
        return SparkSession.active().sessionState().newHadoopConf();
    }

    static Broadcast<SerializableConfiguration> broadcastConf(Configuration conf) {
        JavaSparkContext jsc = JavaSparkContext.fromSparkContext(SparkSession.active().sparkContext());
        return jsc.broadcast(new SerializableConfiguration(conf));
    }

    @Override
    public synchronized InputPartition[] planInputPartitions() {
        if (planned != null) {
            return planned.clone();
        }
        try {
            int parallelism = SparkSession.active().sparkContext().defaultParallelism();
            List<Split> splits = Planner.plan(options, hadoopConf(), parallelism, count);
            planned = splits.toArray(new InputPartition[0]);
            return planned.clone();
        } catch (IOException e) {
            throw new UncheckedIOException("planning the lakelog scan of " + options.topic + ": " + e.getMessage(), e);
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory(schema, options, broadcastConf(hadoopConf()), count);
    }

}
