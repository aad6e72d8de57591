package lakelog.spark;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The password check of the SQL server's Thrift JDBC/ODBC server (`lakelog sql-server
 * --thrift-port`, `hive.server2.authentication=CUSTOM`): a client presents the server's token as
 * its password (any user name), the same token its Spark Connect clients present. HiveServer2 makes
 * an instance per connection (SASL PLAIN); the token is set once by the server before the Thrift
 * service starts ({@link #configure}). Compared in constant time.
 */
public final class ThriftTokenAuthenticator implements PasswdAuthenticationProvider {
    private static volatile byte[] token;

    /** The token clients must present; the Thrift service refuses everyone until it is set. */
    public static void configure(String value) {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("a token is needed");
        }
        token = value.getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        byte[] expected = token;
        if (expected == null || password == null
            || !MessageDigest.isEqual(expected, password.getBytes(StandardCharsets.UTF_8))) {
            throw new AuthenticationException("lakelog: the SQL server's token is needed as the password");
        }
    }
}
