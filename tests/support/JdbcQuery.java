import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * A JDBC client of the SQL server's Thrift JDBC/ODBC server, as a BI tool connects: the Hive JDBC
 * driver (hive-jdbc, shipped in pyspark's jars), one query, its rows printed tab-separated, one
 * line each; a refused connection or query prints `ERROR <SQLState> <message>` and exits 1.
 *
 * Run with the JDK's single-file launcher (nothing to build):
 *   java -cp "$PYSPARK/jars/*" tests/support/JdbcQuery.java jdbc:hive2://127.0.0.1:10000/default USER PASSWORD "SELECT 1"
 */
public final class JdbcQuery {
    public static void main(String[] args) throws Exception {
        Class.forName("org.apache.hive.jdbc.HiveDriver");
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2]);
             Statement s = c.createStatement();
             ResultSet rs = s.executeQuery(args[3])) {
            ResultSetMetaData md = rs.getMetaData();
            while (rs.next()) {
                StringBuilder line = new StringBuilder();
                for (int i = 1; i <= md.getColumnCount(); i++) {
                    if (i > 1) {
                        line.append('\t');
                    }
                    line.append(rs.getString(i));
                }
                System.out.println(line);
            }
        } catch (SQLException e) {
            String m = String.valueOf(e.getMessage()).replace('\n', ' ');
            System.out.println("ERROR " + e.getSQLState() + " " + m.substring(0, Math.min(m.length(), 1000)));
            System.exit(1);
        }
    }
}
