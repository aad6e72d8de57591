package lakelog.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * `spark.read.format("lakelog")` in the JVM: topics read straight from the remote tier by Spark's
 * own tasks (no Python worker), decoded into columnar batches. The same options and columns as the
 * Python source (spark_log/datasource.py), which stays the reference and the fallback where this
 * jar is not on the class path. Registered by name through META-INF/services.
 */
public final class LakelogSource implements TableProvider, DataSourceRegister {
    static final String DDL = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestamp_type INT, "
        + "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, leader_epoch INT, "
        + "producer_id BIGINT";
    static final StructType SCHEMA = StructType.fromDDL(DDL);

    @Override
    public String shortName() {
        return "lakelog";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SCHEMA;
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;  // .schema("offset BIGINT, value BINARY"): a subset of the columns, in any order
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        StructType s = schema == null ? SCHEMA : schema;
        for (StructField f : s.fields()) {
            int i;
            try {
                i = SCHEMA.fieldIndex(f.name());
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("the lakelog data source has no column " + f.name() + "; it has "
                                                   + String.join(", ", SCHEMA.fieldNames()));
            }
            DataType want = SCHEMA.fields()[i].dataType();
            if (!DataType.equalsIgnoreNullability(want, f.dataType())) {
                throw new IllegalArgumentException("the lakelog data source's column " + f.name() + " is "
                                                   + want.sql() + ", not " + f.dataType().sql());
            }
        }
        return new LakelogTable(s);
    }
}
