package lakelog.spark;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A topic of the remote tier as a readable table (batch and micro-batch). */
final class LakelogTable implements SupportsRead {
    private final StructType schema;

    LakelogTable(StructType schema) {
        this.schema = schema;
    }

    @Override
    public String name() {
        return "lakelog";
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new LakelogScanBuilder(schema, new Options(options));
    }
}
