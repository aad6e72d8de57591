package lakelog.spark;

import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.ByteBuffer;
import java.nio.charset.CharsetDecoder;

import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The column vectors of one reader, in the order of the scan's schema: `topic` and `partition`
 * are constants per segment, the others are filled row by row by {@link SegmentScanner}. A
 * column the scan does not need has no vector and costs nothing; with no column at all
 * (`count()`), only the rows are counted.
 */
final class Columns {
    final StructType schema;
    final WritableColumnVector offset, timestamp, timestampType, key, value, headers, leaderEpoch, producerId;
    final ConstantColumnVector topic, partition;
    final ColumnVector[] vectors;
    final ColumnarBatch batch;
    int rows;
    private final CharsetDecoder utf8 = StandardCharsets.UTF_8.newDecoder()
        .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT);

    Columns(StructType schema, int capacity) {
        this.schema = schema;
        vectors = new ColumnVector[schema.fields().length];
        WritableColumnVector o = null, t = null, tt = null, k = null, v = null, h = null, e = null, p = null;
        ConstantColumnVector top = null, part = null;
        int i = 0;
        for (StructField f : schema.fields()) {
            switch (f.name()) {
                case "topic": vectors[i] = top = new ConstantColumnVector(capacity, DataTypes.StringType); break;
                case "partition": vectors[i] = part = new ConstantColumnVector(capacity, DataTypes.IntegerType); break;
                case "offset": vectors[i] = o = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "timestamp": vectors[i] = t = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "timestamp_type": vectors[i] = tt = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "key": vectors[i] = k = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "value": vectors[i] = v = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "headers": vectors[i] = h = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "leader_epoch": vectors[i] = e = new OnHeapColumnVector(capacity, f.dataType()); break;
                case "producer_id": vectors[i] = p = new OnHeapColumnVector(capacity, f.dataType()); break;
                default: throw new IllegalArgumentException("the lakelog data source has no column " + f.name());
            }
            i++;
        }
        offset = o; timestamp = t; timestampType = tt; key = k; value = v; headers = h; leaderEpoch = e; producerId = p;
        topic = top; partition = part;
        batch = new ColumnarBatch(vectors);
    }

    /** Start an empty batch of rows of `topicName`-`partitionId`. */
    void reset(String topicName, int partitionId) {
        rows = 0;
        for (ColumnVector c : vectors) {
            if (c instanceof WritableColumnVector) {
                ((WritableColumnVector) c).reset();
            }
        }
        if (topic != null) {
            topic.setUtf8String(UTF8String.fromString(topicName));
        }
        if (partition != null) {
            partition.setInt(partitionId);
        }
    }

    /** Room for `more` rows past the current ones. */
    void reserve(int more) {
        int need = rows + more;
        for (ColumnVector c : vectors) {
            if (c instanceof WritableColumnVector) {
                ((WritableColumnVector) c).reserve(need);
            }
        }
    }

    ColumnarBatch finish() {
        batch.setNumRows(rows);
        return batch;
    }

    void close() {
        batch.close();
    }

    /** Appends header `index` of row `row`: key bytes as UTF-8 (invalid sequences replaced by
     *  U+FFFD, as Kafka's and the Python reader do), value bytes or null (length -1). */
    void header(byte[] buf, int keyAt, int keyLen, int valueAt, int valueLen) {
        WritableColumnVector entry = headers.arrayData();
        entry.appendStruct(false);
        WritableColumnVector k = entry.getChild(0);
        WritableColumnVector v = entry.getChild(1);
        boolean ascii = true;
        for (int i = 0; i < keyLen; i++) {
            if (buf[keyAt + i] < 0) {
                ascii = false;
                break;
            }
        }
        if (ascii) {
            k.appendByteArray(buf, keyAt, keyLen);
        } else {
            byte[] fixed = utf8Fixed(buf, keyAt, keyLen);
            if (fixed == null) {
                k.appendByteArray(buf, keyAt, keyLen);
            } else {
                k.appendByteArray(fixed, 0, fixed.length);
            }
        }
        if (valueLen < 0) {
            v.appendNull();
        } else {
            v.appendByteArray(buf, valueAt, valueLen);
        }
    }

    /** null when the bytes are valid UTF-8, else their decoding with replacement characters. */
    private byte[] utf8Fixed(byte[] buf, int at, int len) {
        try {
            utf8.reset();
            utf8.decode(ByteBuffer.wrap(buf, at, len));
            return null;
        } catch (CharacterCodingException e) {
            return new String(buf, at, len, StandardCharsets.UTF_8).getBytes(StandardCharsets.UTF_8);
        }
    }
}
