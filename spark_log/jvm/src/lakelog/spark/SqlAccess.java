package lakelog.spark;

import java.io.IOException;
import java.lang.reflect.Method;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.Collections;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SessionHolderInfo;
import org.apache.spark.sql.connect.service.SparkConnectService$;
import org.apache.spark.sql.connect.service.SparkConnectSessionManager;

/**
 * Cluster credentials and topic READ ACLs on the SQL server (`lakelog sql-server` when the
 * cluster's authentication is on; docs/security.md, "SQL").
 *
 * <ol>
 *   <li>{@link SqlAuthInterceptor} passes each Spark Connect call's `authorization` metadata
 *       (`Bearer <API key>` from pyspark's `token=`, or `Basic base64(user:password)`) to a node's
 *       `GET /sql/access`, which authenticates it as every node does and answers the principal and
 *       the topics it may READ ({@link #authenticate}; answers cached {@code cacheMs} per header).
 *       The call's `user_context.user_id` is then replaced by that principal, so the Connect
 *       session (keyed by user id and session id) belongs to it and no client can name another.</li>
 *   <li>{@link SqlAccessExtension}'s check rule runs on every analyzed plan of a client session:
 *       the session's principal is its Connect session's user id ({@link #principalOf}), and each
 *       relation the plan reads must be a topic it may READ ({@link #check}).</li>
 * </ol>
 * Sessions that belong to no Connect client (the server's own, which registers the views) are
 * not checked. Configured once by the server before its Connect service starts ({@link #configure}).
 */
public final class SqlAccess {
    /** A refusal of credentials: the gRPC status to answer (UNAUTHENTICATED, PERMISSION_DENIED, UNAVAILABLE). */
    static final class Refused extends Exception {
        private static final long serialVersionUID = 1L;
        final String status;

        Refused(String status, String message) {
            super(message);
            this.status = status;
        }
    }

    /** What a principal may read, as a node answered at {@code at} (ms). */
    static final class Grant {
        final String principal;
        final boolean superUser, describeCluster;
        final Set<String> readTopics;
        final long at;

        Grant(String principal, boolean superUser, boolean describeCluster, Set<String> readTopics, long at) {
            this.principal = principal;
            this.superUser = superUser;
            this.describeCluster = describeCluster;
            this.readTopics = readTopics;
            this.at = at;
        }

        boolean mayRead(String topic) {
            return superUser || readTopics.contains(topic);
        }
    }

    static final int MAX_AUTHORIZATION_CHARS = 4096;
    static final int MAX_CACHED = 10_000;
    static final int MAX_ANSWER_BYTES = 16 * 1024 * 1024;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String[] TABLE_SUFFIXES = {"_latest", "_errors"};

    private static volatile String[] nodes;
    private static volatile long cacheMs;
    private static volatile long requestTimeoutMs;
    private static volatile URI tablesRoot;
    private static volatile HttpClient http;
    private static final Map<String, Grant> byHeader = new ConcurrentHashMap<>();
    private static final Map<String, Grant> byPrincipal = new ConcurrentHashMap<>();
    private static final Map<Object, String> sessionPrincipal = Collections.synchronizedMap(new WeakHashMap<>());

    private SqlAccess() {}

    /**
     * Turn the checks on: `nodeUrls` (comma-separated; the first that answers is asked), how long
     * an answer is reused (0..3,600,000 ms), the per-request timeout, and the remote tier's root
     * (its `tables/` folder holds the Delta tables the views read).
     */
    public static synchronized void configure(String nodeUrls, long cacheMillis, long timeoutMillis, String remote) {
        if (cacheMillis < 0 || cacheMillis > 3_600_000 || timeoutMillis < 1 || timeoutMillis > 600_000) {
            throw new IllegalArgumentException("cacheMs must lie in 0..3600000 and timeoutMs in 1..600000");
        }
        String[] urls = nodeUrls.split(",");
        for (int i = 0; i < urls.length; i++) {
            String u = urls[i].trim();
            while (u.endsWith("/")) {
                u = u.substring(0, u.length() - 1);
            }
            urls[i] = u;
        }
        String root = remote.endsWith("/") ? remote : remote + "/";
        tablesRoot = new Path(root + "tables").toUri();
        http = HttpClient.newBuilder().connectTimeout(Duration.ofMillis(Math.min(timeoutMillis, 5000))).build();
        cacheMs = cacheMillis;
        requestTimeoutMs = timeoutMillis;
        byHeader.clear();
        nodes = urls;
    }

    static boolean enforced() {
        return nodes != null;
    }

    /** The grant of an `authorization` header value, from the cache or a node. */
    static Grant authenticate(String header) throws Refused {
        String[] urls = nodes;
        if (urls == null) {
            throw new Refused("UNAVAILABLE", "the SQL server's access checks are not configured");
        }
        if (header == null || header.isEmpty()) {
            throw new Refused("UNAUTHENTICATED", "credentials required: a cluster API key (token=...) or user and "
                                                 + "password (authorization=Basic ...)");
        }
        if (header.length() > MAX_AUTHORIZATION_CHARS) {
            throw new Refused("UNAUTHENTICATED", "the authorization metadata is longer than "
                                                 + MAX_AUTHORIZATION_CHARS + " characters");
        }
        String key = digest(header);
        long now = System.currentTimeMillis();
        Grant hit = byHeader.get(key);
        if (hit != null && now - hit.at < cacheMs) {
            return hit;
        }
        Grant g = ask(urls, header, now);
        if (byHeader.size() >= MAX_CACHED) {
            byHeader.clear();
        }
        byHeader.put(key, g);
        byPrincipal.put(g.principal, g);
        return g;
    }

    private static Grant ask(String[] urls, String header, long now) throws Refused {
        String unreachable = "";
        for (String base : urls) {
            HttpRequest req = HttpRequest.newBuilder(URI.create(base + "/sql/access"))
                .timeout(Duration.ofMillis(requestTimeoutMs)).header("Authorization", header).GET().build();
            HttpResponse<byte[]> r;
            try {
                r = http.send(req, HttpResponse.BodyHandlers.ofByteArray());
            } catch (IOException e) {
                unreachable = base + ": " + e;
                continue;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new Refused("UNAVAILABLE", "interrupted while checking the credentials");
            }
            int code = r.statusCode();
            if (code == 200 && r.body().length <= MAX_ANSWER_BYTES) {
                try {
                    JsonNode o = JSON.readTree(r.body());
                    Set<String> topics = new HashSet<>();
                    for (JsonNode t : o.get("read_topics")) {
                        topics.add(t.asText());
                    }
                    return new Grant(o.get("principal").asText(), o.get("super_user").asBoolean(),
                                     o.get("describe_cluster").asBoolean(), Collections.unmodifiableSet(topics), now);
                } catch (IOException | RuntimeException e) {
                    throw new Refused("UNAVAILABLE", "the node's answer to /sql/access is not understood: " + e);
                }
            }
            String message = message(r.body());
            if (code == 401) {
                throw new Refused("UNAUTHENTICATED", "the cluster refused these credentials: " + message);
            }
            if (code == 403) {
                throw new Refused("PERMISSION_DENIED", message);
            }
            unreachable = base + ": HTTP " + code + ": " + message;
        }
        throw new Refused("UNAVAILABLE", "no node could check the credentials (" + unreachable + ")");
    }

    private static String message(byte[] body) {
        String text = new String(body, StandardCharsets.UTF_8);
        try {
            JsonNode m = JSON.readTree(body).get("message");
            if (m != null) {
                text = m.asText();
            }
        } catch (IOException | RuntimeException ignored) {
            // not JSON: the text as it is
        }
        text = text.strip();
        return text.substring(0, Math.min(300, text.length()));
    }

    private static String digest(String header) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(header.getBytes(StandardCharsets.UTF_8));
            StringBuilder sb = new StringBuilder();
            for (byte b : d) {
                sb.append(String.format("%02x", b));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * For the SQL server's own HTTP endpoint (`spark_log/sql_server/endpoint.py`, `POST /v1/sql`): the principal
     * of an `authorization` header, checked exactly as {@link SqlAuthInterceptor} checks a Spark
     * Connect call (same node question, same cache). A refusal is an IllegalStateException whose
     * message starts with its gRPC status name and ": " (UNAUTHENTICATED, PERMISSION_DENIED, UNAVAILABLE).
     */
    public static String principalOfHeader(String header) {
        try {
            return authenticate(header).principal;
        } catch (Refused e) {
            throw new IllegalStateException(e.status + ": " + e.getMessage());
        }
    }

    /**
     * Make `session` (a session of the server's, used for this principal's HTTP queries only)
     * checked as `principal`'s: {@link SqlAccessExtension} then applies to its plans the checks it
     * applies to that principal's Spark Connect sessions.
     */
    public static void bindSession(SparkSession session, String principal) {
        if (principal == null || principal.isEmpty()) {
            throw new IllegalArgumentException("a principal is needed");
        }
        sessionPrincipal.put(session, principal);
    }

    /** `message` with `user_context.user_id` set to `principal` (generated protobuf messages: by
     *  their public accessors); a message without a user context is returned as it is. */
    static Object withUserId(Object message, String principal) {
        try {
            Class<?> c = message.getClass();
            Method has;
            try {
                has = c.getMethod("hasUserContext");
            } catch (NoSuchMethodException e) {
                return message;
            }
            Object builder = c.getMethod("toBuilder").invoke(message);
            Object uc = builder.getClass().getMethod("getUserContextBuilder").invoke(builder);
            uc.getClass().getMethod("setUserId", String.class).invoke(uc, principal);
            return builder.getClass().getMethod("build").invoke(builder);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot set the user id of a " + message.getClass().getName(), e);
        }
    }

    /** The principal a session belongs to: its Spark Connect session's user id (set by the
     *  interceptor), or null for a session of no Connect client (the server's own). */
    static String principalOf(SparkSession session) {
        String known = sessionPrincipal.get(session);
        if (known != null) {
            return known;
        }
        SparkConnectSessionManager manager = SparkConnectService$.MODULE$.sessionManager();
        scala.collection.Iterator<SessionHolderInfo> it = manager.listActiveSessions().iterator();
        while (it.hasNext()) {
            SessionHolderInfo info = it.next();
            scala.Option<SessionHolder> holder = manager.getIsolatedSessionIfPresent(info.key());
            if (holder.isDefined() && holder.get().session() == session) {
                sessionPrincipal.put(session, info.userId());
                return info.userId();
            }
        }
        return null;
    }

    /** The principal's current grant, or a refusal when none was checked (never expected: every
     *  call of a client session went through the interceptor). */
    static Grant grantOf(String principal) {
        Grant g = byPrincipal.get(principal);
        if (g == null) {
            throw new AccessDeniedException(principal + ": no credentials were checked for this session");
        }
        return g;
    }

    static void requireTopic(Grant g, String topic) {
        if (!g.mayRead(topic)) {
            throw new AccessDeniedException(g.principal + " is not authorized to READ topic '" + topic
                                            + "' (lakelog." + topic + ")");
        }
    }

    /** A file read: only the Delta tables of the remote tier, each as its topic allows. */
    static void requirePath(Grant g, Path path) {
        URI u = path.toUri();
        URI root = tablesRoot;
        String rootPath = root.getPath().endsWith("/") ? root.getPath() : root.getPath() + "/";
        boolean sameStore = java.util.Objects.equals(norm(u.getScheme()), norm(root.getScheme()))
            && java.util.Objects.equals(u.getAuthority(), root.getAuthority());
        String p = u.getPath();
        if (!sameStore || p == null || !p.startsWith(rootPath) || p.contains("/../")) {
            throw new AccessDeniedException(g.principal + " may read only the lakelog.* tables through the SQL server, "
                                            + "not " + path);
        }
        String name = p.substring(rootPath.length()).split("/", 2)[0];
        if (name.startsWith("_")) {
            if (!(g.superUser || g.describeCluster)) {
                throw new AccessDeniedException(g.principal + " is not authorized to DESCRIBE the cluster (lakelog."
                                                + name + ")");
            }
            return;
        }
        if (g.mayRead(name)) {
            return;
        }
        for (String suffix : TABLE_SUFFIXES) {
            if (name.endsWith(suffix) && g.mayRead(name.substring(0, name.length() - suffix.length()))) {
                return;
            }
        }
        throw new AccessDeniedException(g.principal + " is not authorized to READ topic '" + topicOf(name)
                                        + "' (lakelog." + name + ")");
    }

    private static String topicOf(String table) {
        for (String suffix : TABLE_SUFFIXES) {
            if (table.endsWith(suffix)) {
                return table.substring(0, table.length() - suffix.length());
            }
        }
        return table;
    }

    private static String norm(String scheme) {
        return scheme == null ? "file" : ("s3a".equals(scheme) ? "s3" : scheme);
    }
}
