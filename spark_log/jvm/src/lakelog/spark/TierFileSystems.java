package lakelog.spark;

import java.io.IOException;
import java.net.URI;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * The remote tier's FileSystems, shared by the plannings and tasks of one JVM: creating an S3A
 * FileSystem (its AWS client, thread pools and connection pool) cost 20-50 ms on the loaded test
 * machine, paid before by every planning and every task, and its first requests open new
 * connections.
 *
 * <p>Keyed by the root URL, the current user and every {@code fs.*} entry of the configuration
 * (endpoint, credentials, stream type, per-bucket settings), never by scheme and bucket alone as
 * Hadoop's own cache is ({@code FileSystem.get}): a later session of the same JVM with another
 * endpoint or other credentials gets a FileSystem of its own, never the earlier session's (see
 * {@link RemoteTier}). At most {@link #MAX_ENTRIES} are kept, least recently used first out; an
 * evicted FileSystem is closed when its last user releases it, so a read in flight is never cut.
 * Thread-safe; a FileSystem is itself safe to share between threads.
 */
final class TierFileSystems {
    static final int MAX_ENTRIES = 16;

    /** One shared FileSystem and how many tiers hold it. */
    static final class Lease {
        final String key;
        final FileSystem fs;
        private int users;
        private boolean evicted;

        private Lease(String key, FileSystem fs) {
            this.key = key;
            this.fs = fs;
        }
    }

    private static final LinkedHashMap<String, Lease> LEASES = new LinkedHashMap<>(16, 0.75f, true);

    private TierFileSystems() {}

    /** The FileSystem for `root` under `conf`, created on first use; release it when done. */
    static Lease acquire(String root, Configuration conf) throws IOException {
        String key = key(root, conf);
        Lease evict = null;
        Lease lease;
        synchronized (LEASES) {
            lease = LEASES.get(key);
            if (lease == null) {
                lease = new Lease(key, FileSystem.newInstance(URI.create(root + "/"), conf));
                LEASES.put(key, lease);
                if (LEASES.size() > MAX_ENTRIES) {
                    Iterator<Lease> eldest = LEASES.values().iterator();
                    evict = eldest.next();
                    eldest.remove();
                    evict.evicted = true;
                    if (evict.users > 0) {
                        evict = null;  // closed by its last release
                    }
                }
            }
            lease.users++;
        }
        if (evict != null) {
            evict.fs.close();
        }
        return lease;
    }

    /** Gives `lease` back; closes its FileSystem if it was evicted and this was its last user. */
    static void release(Lease lease) throws IOException {
        boolean close;
        synchronized (LEASES) {
            lease.users--;
            close = lease.evicted && lease.users == 0;
        }
        if (close) {
            lease.fs.close();
        }
    }

    /** Closes every FileSystem no tier holds and forgets them all (tests; a held one closes at its release). */
    static void clear() throws IOException {
        java.util.List<Lease> idle = new java.util.ArrayList<>();
        synchronized (LEASES) {
            for (Lease l : LEASES.values()) {
                l.evicted = true;
                if (l.users == 0) {
                    idle.add(l);
                }
            }
            LEASES.clear();
        }
        for (Lease l : idle) {
            l.fs.close();
        }
    }

    private static String key(String root, Configuration conf) throws IOException {
        TreeMap<String, String> fs = new TreeMap<>();
        for (Map.Entry<String, String> e : conf) {
            if (e.getKey().startsWith("fs.")) {
                fs.put(e.getKey(), e.getValue());
            }
        }
        StringBuilder b = new StringBuilder(root).append('\n').append(UserGroupInformation.getCurrentUser().getUserName());
        for (Map.Entry<String, String> e : fs.entrySet()) {
            b.append('\n').append(e.getKey()).append('=').append(e.getValue());
        }
        return b.toString();
    }
}
