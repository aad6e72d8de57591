package lakelog.spark;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.command.DataWritingCommand;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * `spark.sql.extensions` entry of the SQL server with cluster authentication: a check rule on
 * every analyzed plan of a Spark Connect client's session (see {@link SqlAccess}). Views are
 * expanded in an analyzed plan, so `lakelog.<topic>` is checked as the relation under it:
 * <ul>
 *   <li>the `lakelog` data source: READ on its `topic`;</li>
 *   <li>files (Delta tables included): only under the remote tier's `tables/`, READ on the table's
 *       topic (`<topic>`, `<topic>_latest`, `<topic>_errors`), DESCRIBE on the cluster for `_*`;</li>
 *   <li>refused: any other table or data source (Python data sources, Hive, streaming) and writes;</li>
 *   <li>refused: code of the client's or of the server's choosing run by the query — Python, pandas
 *       and Arrow UDFs, `TRANSFORM ... USING` (a shell
 *       command), `reflect` / `java_method` (any static Java method, e.g. reading the server's
 *       environment) — which would read past these checks.</li>
 * </ul>
 */
public final class SqlAccessExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, scala.Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public scala.Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
                return new AbstractFunction1<LogicalPlan, BoxedUnit>() {
                    @Override
                    public BoxedUnit apply(LogicalPlan plan) {
                        check(session, plan);
                        return BoxedUnit.UNIT;
                    }
                };
            }
        });
        return BoxedUnit.UNIT;
    }

    static void check(SparkSession session, LogicalPlan plan) {
        if (!SqlAccess.enforced()) {
            return;
        }
        String principal = SqlAccess.principalOf(session);
        if (principal == null) {
            return;  // the server's own session
        }
        SqlAccess.Grant grant = SqlAccess.grantOf(principal);
        plan.foreachWithSubqueries(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
            @Override
            public BoxedUnit apply(LogicalPlan node) {
                checkNode(grant, node);
                return BoxedUnit.UNIT;
            }
        });
    }

    /** Plan nodes and expressions (by simple class name) that run code a check cannot see through.
     *  Scala UDFs and typed Dataset functions (MapPartitions, ...) are not among them: Delta's own
     *  reads of its log use them, in the client's session; a client's own would need its classes
     *  on the server, which the interceptor refuses to upload (AddArtifacts). */
    static final java.util.regex.Pattern RUNS_CODE = java.util.regex.Pattern.compile(
        "Python.*|.*InPandas.*|.*InArrow.*|ScriptTransformation|CallMethodViaReflection|TryReflect");

    private static void checkCode(SqlAccess.Grant g, Object node) {
        String name = node.getClass().getSimpleName();
        if (RUNS_CODE.matcher(name).matches()) {
            throw new AccessDeniedException(g.principal + " may not run " + name + " through the SQL server (user "
                                            + "code, shell commands and reflection are refused)");
        }
    }

    private static void checkNode(SqlAccess.Grant g, LogicalPlan node) {
        checkCode(g, node);
        scala.collection.Iterator<Expression> exprs = node.expressions().iterator();
        while (exprs.hasNext()) {
            exprs.next().foreach(new AbstractFunction1<Expression, BoxedUnit>() {
                @Override
                public BoxedUnit apply(Expression e) {
                    checkCode(g, e);
                    return BoxedUnit.UNIT;
                }
            });
        }
        if (node instanceof DataSourceV2Relation) {
            DataSourceV2Relation r = (DataSourceV2Relation) node;
            Table t = r.table();
            if (t instanceof LakelogTable) {
                String topic = r.options().get("topic");
                SqlAccess.requireTopic(g, topic == null ? "" : topic);
                return;
            }
            if (t.getClass().getName().endsWith("DeltaTableV2")) {
                try {
                    SqlAccess.requirePath(g, (Path) t.getClass().getMethod("path").invoke(t));
                    return;
                } catch (ReflectiveOperationException e) {
                    throw new AccessDeniedException(g.principal + ": cannot tell where " + t.name() + " lies");
                }
            }
            throw new AccessDeniedException(g.principal + " may not read " + t.name() + " through the SQL server");
        } else if (node instanceof LogicalRelation) {
            Object rel = ((LogicalRelation) node).relation();
            if (!(rel instanceof HadoopFsRelation)) {
                throw new AccessDeniedException(g.principal + " may not read " + rel + " through the SQL server");
            }
            scala.collection.Iterator<Path> paths = ((HadoopFsRelation) rel).location().rootPaths().iterator();
            while (paths.hasNext()) {
                SqlAccess.requirePath(g, paths.next());
            }
        } else if (node instanceof HiveTableRelation || node instanceof StreamingRelationV2
                   || node.getClass().getSimpleName().equals("StreamingRelation")) {
            throw new AccessDeniedException(g.principal + " may not read " + node.nodeName() + " through the SQL server");
        } else if (node instanceof DataWritingCommand || node instanceof V2WriteCommand) {
            throw new AccessDeniedException(g.principal + " may not write through the SQL server");
        }
    }
}
