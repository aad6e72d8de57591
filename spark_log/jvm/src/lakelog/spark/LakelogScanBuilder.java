package lakelog.spark;

import java.time.Instant;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;

/**
 * Column pruning (only the columns the query uses are decoded; none for `count()`) and pruning by
 * `partition`, `offset` and `timestamp` predicates: comparisons with a literal, IN, AND. Pushed
 * predicates narrow what is read (partitions, segments by the manifest, the first batch by the
 * offset index, rows by offset and timestamp); Spark evaluates every filter again after the scan
 * except those the reader applies exactly ({@link #exact}), so a predicate this source reads
 * loosely never changes a result, and count() is pushed over partition and offset filters. A scan builder
 * lives for one query: what one query pushes never narrows another (unlike Python sources).
 */
final class LakelogScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
                                         SupportsPushDownAggregates {
    private StructType schema;
    private final Options options;
    private Filter[] pushed = new Filter[0];
    private boolean count;

    LakelogScanBuilder(StructType schema, Options options) {
        this.schema = schema;
        this.options = options.copy();
    }

    @Override
    public void pruneColumns(StructType required) {
        schema = required;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        List<Filter> used = new ArrayList<>();
        List<Filter> after = new ArrayList<>();
        for (Filter f : filters) {
            boolean applied = apply(f);
            if (applied) {
                used.add(f);
            }
            if (!applied || !exact(f)) {
                after.add(f);
            }
        }
        pushed = used.toArray(new Filter[0]);
        return after.toArray(new Filter[0]);  // evaluated again after the scan
    }

    /** True when reading with `f` applied returns exactly the rows `f` admits, so Spark need not
     *  evaluate it again (and may push count() over it): comparisons of `offset` with a BIGINT
     *  (rows are cut to [offsetLow, offsetHigh] in every segment and in the hot tail), `partition`
     *  = or IN INT literals, IS NOT NULL of these two (never null), and ANDs of those. Timestamps, IN on offsets (read as their range) and
     *  everything else are evaluated again. */
    static boolean exact(Filter f) {
        if (f instanceof And) {
            return exact(((And) f).left()) && exact(((And) f).right());
        }
        if (f instanceof IsNotNull) {
            String c = ((IsNotNull) f).attribute();
            return "offset".equals(c) || "partition".equals(c);
        }
        String col = attribute(f);
        if (col != null) {  // a comparison with a literal
            Object v = value(f);
            if ("partition".equals(col)) {
                return f instanceof EqualTo && v instanceof Integer;
            }
            if (!"offset".equals(col) || !(v instanceof Long)) {
                return false;
            }
            // a strict bound at the end of BIGINT's range has no inclusive form: not applied
            long x = (Long) v;
            return !(f instanceof GreaterThan && x == Long.MAX_VALUE) && !(f instanceof LessThan && x == Long.MIN_VALUE);
        }
        if (f instanceof In && "partition".equals(((In) f).attribute())) {
            for (Object x : ((In) f).values()) {
                if (!(x instanceof Integer)) {
                    return false;
                }
            }
            return true;
        }
        return false;
    }

    /** The column of `f` when it compares a column with a literal (=, >, >=, <, <=), else null. */
    private static String attribute(Filter f) {
        if (f instanceof EqualTo) {
            return ((EqualTo) f).attribute();
        } else if (f instanceof GreaterThan) {
            return ((GreaterThan) f).attribute();
        } else if (f instanceof GreaterThanOrEqual) {
            return ((GreaterThanOrEqual) f).attribute();
        } else if (f instanceof LessThan) {
            return ((LessThan) f).attribute();
        } else if (f instanceof LessThanOrEqual) {
            return ((LessThanOrEqual) f).attribute();
        }
        return null;
    }

    /** The literal of a comparison that {@link #attribute} names. */
    private static Object value(Filter f) {
        if (f instanceof EqualTo) {
            return ((EqualTo) f).value();
        } else if (f instanceof GreaterThan) {
            return ((GreaterThan) f).value();
        } else if (f instanceof GreaterThanOrEqual) {
            return ((GreaterThanOrEqual) f).value();
        } else if (f instanceof LessThan) {
            return ((LessThan) f).value();
        }
        return ((LessThanOrEqual) f).value();
    }

    @Override
    public Filter[] pushedFilters() {
        return pushed;
    }

    /** Narrow the options by `f`; true when it was used. */
    private boolean apply(Filter f) {
        if (f instanceof And) {
            boolean a = apply(((And) f).left());
            boolean b = apply(((And) f).right());
            return a || b;
        }
        if (f instanceof IsNotNull) {  // what Spark infers from a comparison; these columns are never null
            String c = ((IsNotNull) f).attribute();
            return "offset".equals(c) || "partition".equals(c);
        }
        String col = attribute(f);
        if (col != null) {
            Object v = value(f);
            if (f instanceof EqualTo) {
                return bound(col, v, v, true, true);
            } else if (f instanceof GreaterThan || f instanceof GreaterThanOrEqual) {
                return bound(col, v, null, f instanceof GreaterThanOrEqual, true);
            }
            return bound(col, null, v, true, f instanceof LessThanOrEqual);
        }
        if (f instanceof In && "partition".equals(((In) f).attribute())) {
            TreeSet<Integer> set = new TreeSet<>();
            for (Object x : ((In) f).values()) {
                if (!(x instanceof Integer)) {
                    return false;
                }
                set.add((Integer) x);
            }
            restrictPartitions(set);
            return true;
        } else if (f instanceof In && "offset".equals(((In) f).attribute()) && ((In) f).values().length > 0) {
            long lo = Long.MAX_VALUE, hi = Long.MIN_VALUE;
            for (Object x : ((In) f).values()) {
                if (!(x instanceof Long)) {
                    return false;
                }
                lo = Math.min(lo, (Long) x);
                hi = Math.max(hi, (Long) x);
            }
            options.offsetLow = Math.max(options.offsetLow, lo);
            options.offsetHigh = Math.min(options.offsetHigh, hi);
            return true;
        }
        return false;
    }

    private void restrictPartitions(TreeSet<Integer> set) {
        if (options.partitions == null) {
            options.partitions = set;
        } else {
            options.partitions.retainAll(set);
        }
    }

    /** Bounds from `low` (inclusive when lowIncl) and `high`; null: that side is unbounded. The
     *  right side's inclusivity is `highIncl` (for EqualTo both are inclusive). */
    private boolean bound(String col, Object low, Object high, boolean lowIncl, boolean highIncl) {
        // EqualTo passes (v, v, true, true); GreaterThan (v, null, false, _); LessThan (null, v, _, false)
        switch (col) {
            case "partition": {
                if ((low != null && !(low instanceof Integer)) || (high != null && !(high instanceof Integer))) {
                    return false;
                }
                if (low != null && high != null) {  // equality
                    TreeSet<Integer> one = new TreeSet<>();
                    one.add((Integer) low);
                    restrictPartitions(one);
                    return true;
                }
                return false;  // a range of partitions: read all, Spark filters
            }
            case "offset": {
                if ((low != null && !(low instanceof Long)) || (high != null && !(high instanceof Long))) {
                    return false;
                }
                if (low != null) {
                    long l = (Long) low;
                    if (!lowIncl) {
                        if (l == Long.MAX_VALUE) {
                            return false;
                        }
                        l += 1;
                    }
                    options.offsetLow = Math.max(options.offsetLow, l);
                }
                if (high != null) {
                    long h = (Long) high;
                    if (!highIncl) {
                        if (h == Long.MIN_VALUE) {
                            return false;
                        }
                        h -= 1;
                    }
                    options.offsetHigh = Math.min(options.offsetHigh, h);
                }
                return true;
            }
            case "timestamp": {
                Long lowUs = micros(low), highUs = micros(high);
                if ((low != null && lowUs == null) || (high != null && highUs == null)) {
                    return false;
                }
                // rows are whole milliseconds: ts_us = ms * 1000
                if (lowUs != null) {
                    long ms = lowIncl ? -Math.floorDiv(-lowUs, 1000) : Math.floorDiv(lowUs, 1000) + 1;
                    options.timestampLow = Math.max(options.timestampLow, ms);
                }
                if (highUs != null) {
                    long ms = highIncl ? Math.floorDiv(highUs, 1000) : -Math.floorDiv(-highUs, 1000) - 1;
                    options.timestampHigh = Math.min(options.timestampHigh, ms);
                }
                return true;
            }
            default:
                return false;
        }
    }

    private static Long micros(Object v) {
        if (v == null) {
            return null;
        }
        Instant i;
        if (v instanceof Instant) {
            i = (Instant) v;
        } else if (v instanceof java.sql.Timestamp) {
            i = ((java.sql.Timestamp) v).toInstant();
        } else if (v instanceof LocalDateTime) {  // TIMESTAMP_NTZ compared with the column: not pushed
            return null;
        } else {
            return null;
        }
        try {
            return Math.addExact(Math.multiplyExact(i.getEpochSecond(), 1_000_000L), i.getNano() / 1000);
        } catch (ArithmeticException e) {
            return null;
        }
    }

    /** `count(*)` (or the count of a column that is never null) with no GROUP BY: each split
     *  answers one row of its row count ({@link CountReader}), Spark adds them up. Spark offers
     *  it only when no filter stays to evaluate after the scan. */
    @Override
    public boolean pushAggregation(Aggregation aggregation) {
        if (!options.countFromManifest || aggregation.groupByExpressions().length != 0
            || aggregation.aggregateExpressions().length != 1) {
            return false;
        }
        AggregateFunc f = aggregation.aggregateExpressions()[0];
        boolean rows = f instanceof CountStar;
        if (f instanceof Count && !((Count) f).isDistinct() && ((Count) f).column() instanceof NamedReference) {
            String[] name = ((NamedReference) ((Count) f).column()).fieldNames();
            rows = name.length == 1 && (name[0].equals("offset") || name[0].equals("partition"));
        }
        count = rows;
        return rows;
    }

    @Override
    public Scan build() {
        return new LakelogScan(schema, options, count);
    }
}
