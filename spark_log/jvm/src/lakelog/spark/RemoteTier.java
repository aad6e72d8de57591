package lakelog.spark;

import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32C;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The remote tier under a root URL, through Hadoop's FileSystem API: `file:///path` and
 * `s3://bucket/prefix` (read as `s3a://`, the S3A settings of the session apply). Keys as in
 * tiering/layout.py: `<topic>-<partition>/manifest.json`, `<topic>-<partition>/<base offset, 20
 * digits>-<segment id>.{log,index,...}`.
 *
 * <p>Each tier takes a FileSystem from {@link TierFileSystems} for the configuration it is given,
 * and gives it back with {@link #close()}. Not {@code FileSystem.get}: Hadoop's cache is JVM-wide
 * and keyed by scheme, bucket (authority) and user only, never by the configuration, so once a
 * session had read {@code s3a://b/...}, a later session of the same JVM (the earlier one stopped)
 * got the earlier session's instance for a bucket of the same name: the old endpoint and
 * credentials, another store, read without an error (planning then found that store's manifests,
 * or none). {@link TierFileSystems} keys its FileSystems by the configuration's {@code fs.*}
 * entries too. A tier lives for one planning or one task's reads.
 *
 * <p>Objects whose length the manifest gives (`.log`, `.index`) are opened with that length
 * ({@code fs.option.openfile.length}) through S3A's classic input stream: a GET and nothing
 * else. Hadoop 3.5's default S3A stream, the analytics accelerator's, skips its HEAD only when
 * given the object's etag too (`AnalyticsStream.buildOpenStreamInformation`), which the manifest
 * does not hold: it sent a HEAD before every segment's GET (counted at the S3 server:
 * tests/integration/test_spark_jvm_s3_requests.py). The setting applies to this tier's own
 * FileSystem only, never to Spark's or Delta's.
 */
final class RemoteTier implements Closeable {
    static final String S3A_STREAM_TYPE = "fs.s3a.input.stream.type";
    static final String S3A_READAHEAD = "fs.s3a.readahead.range";
    /** The most a closed stream reads to its GET's end to keep the connection (Hadoop's default). */
    static final long MAX_DRAIN_BYTES = 64 * 1024;
    /** Bytes of the first read of a manifest (see {@link #manifestOrNull}): about 3,000 segments. */
    static final int MANIFEST_PROBE_BYTES = 1 << 20;
    final String root;
    private final TierFileSystems.Lease lease;
    private final FileSystem fs;
    private boolean closed;

    RemoteTier(String rootUrl, Configuration conf) throws IOException {
        this.root = hadoopRoot(rootUrl);
        Configuration own = new Configuration(conf);
        own.set(S3A_STREAM_TYPE, "classic");
        // A stream closed with more than the readahead range left unread is aborted, at most that
        // range drained (S3AInputStream.closeStream): a task that stops inside a segment (its
        // part's end, a LIMIT) never reads the rest of a long GET to reuse the connection.
        own.setLong(S3A_READAHEAD, Math.min(conf.getLongBytes(S3A_READAHEAD, MAX_DRAIN_BYTES), MAX_DRAIN_BYTES));
        this.lease = TierFileSystems.acquire(root, own);
        this.fs = lease.fs;
    }

    /** Gives this tier's FileSystem back to {@link TierFileSystems}; streams it opened are done. */
    @Override
    public synchronized void close() throws IOException {
        if (!closed) {
            closed = true;
            TierFileSystems.release(lease);
        }
    }

    /** `s3://b/p` -> `s3a://b/p`; `file:///x` kept; no trailing slash. */
    static String hadoopRoot(String url) {
        String u = url;
        while (u.endsWith("/") && !u.endsWith(":///")) {
            u = u.substring(0, u.length() - 1);
        }
        if (u.startsWith("s3://")) {
            return "s3a://" + u.substring("s3://".length());
        }
        if (u.startsWith("s3a://") || u.startsWith("file:/")) {
            return u;
        }
        throw new IllegalArgumentException("remote URL " + url + ": the scheme must be s3:// or file://");
    }

    Path path(String key) {
        return new Path(root + "/" + key);
    }

    static String partitionDir(String topic, int partition) {
        return topic + "-" + partition;
    }

    static String segmentKey(String topic, int partition, Manifest.Segment s, String suffix) {
        return partitionDir(topic, partition) + "/" + s.stem() + suffix;
    }

    /** The manifest of `topic`-`partition` (see {@link #manifestOrNull}); a missing one is an error. */
    Manifest manifest(String topic, int partition) throws IOException {
        Manifest m = manifestOrNull(topic, partition);
        if (m == null) {
            String key = partitionDir(topic, partition) + "/manifest.json";
            throw new java.io.FileNotFoundException(key + " is missing");
        }
        return m;
    }

    /**
     * The manifest of `topic`-`partition`, or null when there is none. Read without a HEAD: the
     * object is opened with a declared length of {@link #MANIFEST_PROBE_BYTES} (S3A's classic
     * stream then sends one GET of that range, which S3 answers with the whole object when it is
     * shorter, and the stream ends at the object's end). A manifest that fills the probe may be
     * longer: it is read again whole (a HEAD for its length, then one GET). Either way
     * the bytes pass the manifest's own checks (canonical form, version, CRC-32C, topic and
     * partition), so a short or stale read can never be taken for a manifest.
     */
    Manifest manifestOrNull(String topic, int partition) throws IOException {
        String key = partitionDir(topic, partition) + "/manifest.json";
        byte[] raw;
        try {
            try (FSDataInputStream in = openWithLength(key, MANIFEST_PROBE_BYTES, "whole-file")) {
                raw = in.readNBytes(MANIFEST_PROBE_BYTES);
            }
            if (raw.length >= MANIFEST_PROBE_BYTES) {
                long length = fs.getFileStatus(path(key)).getLen();
                if (length > Integer.MAX_VALUE - 8) {
                    throw new RemoteCorruptionException(key, -1, key + ": a manifest of " + length + " bytes");
                }
                try (FSDataInputStream in = openWithLength(key, length, "whole-file")) {
                    raw = in.readNBytes((int) length);
                }
            }
        } catch (java.io.FileNotFoundException e) {
            return null;
        }
        Manifest m = Manifest.parse(key, raw);
        if (!m.topic.equals(topic) || m.partition != partition) {
            throw new RemoteCorruptionException(key, -1, key + ": the manifest is for " + m.topic + "-" + m.partition);
        }
        return m;
    }

    /**
     * The manifests of the partitions of `topic` that `wanted` admits, by partition: one LIST of
     * the root (the `<topic>-<n>` directories), then each manifest read ({@link #manifestOrNull},
     * one GET on S3) on a pool of at most `threads` threads that lives for this call. Partitions
     * with a directory but no manifest are left out, as before any segment was tiered. The first
     * error of any read is thrown (a corrupt manifest names its object).
     */
    java.util.SortedMap<Integer, Manifest> manifests(String topic, java.util.function.IntPredicate wanted, int threads)
            throws IOException {
        List<Integer> found = new ArrayList<>();
        for (int p : partitionDirs(topic)) {
            if (wanted.test(p)) {
                found.add(p);
            }
        }
        java.util.TreeMap<Integer, Manifest> out = new java.util.TreeMap<>();
        if (found.isEmpty()) {
            return out;
        }
        int n = Math.max(1, Math.min(threads, found.size()));
        if (n == 1) {
            for (int p : found) {
                Manifest m = manifestOrNull(topic, p);
                if (m != null) {
                    out.put(p, m);
                }
            }
            return out;
        }
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(n, r -> {
            Thread t = new Thread(r, "lakelog-planning " + topic);
            t.setDaemon(true);
            return t;
        });
        try {
            List<java.util.concurrent.Future<Manifest>> reads = new ArrayList<>();
            for (int p : found) {
                reads.add(pool.submit(() -> manifestOrNull(topic, p)));
            }
            for (int i = 0; i < found.size(); i++) {
                Manifest m;
                try {
                    m = reads.get(i).get();
                } catch (java.util.concurrent.ExecutionException e) {
                    Throwable c = e.getCause();
                    if (c instanceof IOException) {
                        throw (IOException) c;
                    }
                    if (c instanceof RuntimeException) {
                        throw (RuntimeException) c;
                    }
                    throw new IOException(c);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new java.io.InterruptedIOException("interrupted while reading the manifests of " + topic);
                }
                if (m != null) {
                    out.put(found.get(i), m);
                }
            }
            return out;
        } finally {
            pool.shutdownNow();
        }
    }

    /** The partitions of `topic` that have a directory under the root, sorted (one listing of the
     *  root: a LIST on S3). */
    List<Integer> partitionDirs(String topic) throws IOException {
        Pattern dir = Pattern.compile("^" + Pattern.quote(topic) + "-(\\d+)$");
        TreeSet<Integer> out = new TreeSet<>();
        FileStatus[] found;
        try {
            found = fs.listStatus(new Path(root + "/"));
        } catch (java.io.FileNotFoundException e) {
            return new ArrayList<>();
        }
        for (FileStatus st : found) {
            Matcher m = dir.matcher(st.getPath().getName());
            if (st.isDirectory() && m.matches()) {
                out.add(Integer.parseInt(m.group(1)));
            }
        }
        return new ArrayList<>(out);
    }

    /** The whole object `key`, checked against the size and CRC-32C the manifest gives. */
    byte[] checkedObject(String key, long size, long crc) throws IOException {
        byte[] data;
        try (FSDataInputStream in = openKnown(key, size, "whole-file")) {
            data = in.readNBytes((int) Math.min(size, Integer.MAX_VALUE - 8));
        } catch (java.io.FileNotFoundException e) {  // S3: found missing by the GET, there is no HEAD
            throw new RemoteCorruptionException(key, -1, key + " is missing");
        }
        CRC32C c = new CRC32C();
        c.update(data, 0, data.length);
        if (data.length != size || c.getValue() != crc) {
            throw new RemoteCorruptionException(key, -1, String.format(
                "%s: %d bytes with CRC-32C %#010x, the manifest says %d bytes with %#010x", key, data.length,
                c.getValue(), size, crc));
        }
        return data;
    }

    /**
     * The byte range [start, end) of the segment's `.log` that holds its offsets [from, to]: start
     * is the position of the offset index's floor entry of `from` (0 at or below the base), end
     * the position of the entry after the first one whose offset reaches `to` (the object's size
     * when `to` is at or past the segment's end offset, or no such entry). An entry (O, P) says the
     * batch at P ends at offset O (index/offset_index.py): every batch after the one at P starts
     * above O, so with O >= to nothing from the next entry's position on is wanted. The index
     * (8-byte entries of relative offset u32 + position u32, big-endian) is read only when one of
     * the bounds needs it: one GET of the whole object, checked against the manifest's size and
     * CRC-32C.
     */
    long[] byteRange(String topic, int partition, Manifest.Segment s, long from, long to) throws IOException {
        boolean needStart = from > s.baseOffset, needEnd = to < s.endOffset;
        if ((!needStart && !needEnd) || s.indexBytes == 0) {
            return new long[] {0, s.sizeInBytes};
        }
        String key = segmentKey(topic, partition, s, ".index");
        byte[] idx = checkedObject(key, s.indexBytes, s.indexCrc);
        if (idx.length % 8 != 0) {
            throw new RemoteCorruptionException(key, -1, key + ": offset index of " + idx.length
                                                         + " bytes is not whole 8-byte entries");
        }
        int entries = idx.length / 8;
        long start = 0, end = s.sizeInBytes;
        if (needStart) {
            int i = firstAbove(idx, entries, from - s.baseOffset);  // first entry with offset > from
            if (i > 0) {
                start = Codecs.be32(idx, (i - 1) * 8 + 4) & 0xFFFFFFFFL;
            }
        }
        if (needEnd) {
            int i = firstAbove(idx, entries, to - s.baseOffset - 1);  // first entry with offset >= to
            if (i + 1 < entries) {
                end = Codecs.be32(idx, (i + 1) * 8 + 4) & 0xFFFFFFFFL;
            }
        }
        if (start > end || end > s.sizeInBytes) {
            throw new RemoteCorruptionException(key, -1, key + ": offset index positions [" + start + ", " + end
                                                         + ") do not lie in the " + s.sizeInBytes + " bytes of the log");
        }
        return new long[] {start, end};
    }

    /** The first index entry whose relative offset is above `rel` (entries: when none is). */
    private static int firstAbove(byte[] idx, int entries, long rel) {
        int lo = 0, hi = entries;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            long r = Codecs.be32(idx, mid * 8) & 0xFFFFFFFFL;
            if (r <= rel) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    /** The `.log` object's bytes [from, end) read sequentially (one streaming GET on S3, sent at
     *  the first read, of that range only: `end` is declared as the object's length, which S3A's
     *  classic stream asks for as the GET's last byte; a missing object is found there, and named
     *  as {@link #openKnown} does). `end` is the manifest's size, or a batch boundary below it
     *  ({@link #byteRange}). */
    InputStream openLog(String key, long from, long end) throws IOException {
        FSDataInputStream in = openKnown(key, end, "sequential");
        if (from > 0) {
            in.seek(from);
        }
        return new MissingNamed(in, key);
    }

    /** Reads of an object opened without a HEAD: the GET's "no such key" becomes the typed error. */
    private static final class MissingNamed extends java.io.FilterInputStream {
        private final String key;

        MissingNamed(InputStream in, String key) {
            super(in);
            this.key = key;
        }

        @Override
        public int read() throws IOException {
            try {
                return in.read();
            } catch (java.io.FileNotFoundException e) {
                throw new RemoteCorruptionException(key, -1, key + " is missing");
            }
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            try {
                return in.read(b, off, len);
            } catch (java.io.FileNotFoundException e) {
                throw new RemoteCorruptionException(key, -1, key + " is missing");
            }
        }
    }

    /** `key` opened with the length the manifest gives (no HEAD on S3, see above) and a read
     *  policy; a missing object is a {@link RemoteCorruptionException} naming it. */
    private FSDataInputStream openKnown(String key, long size, String policy) throws IOException {
        try {
            return openWithLength(key, size, policy);
        } catch (java.io.FileNotFoundException e) {
            throw new RemoteCorruptionException(key, -1, key + " is missing");
        }
    }

    /** `key` opened with a declared length and a read policy (no HEAD on S3); a missing object
     *  throws FileNotFoundException, here or at the first read. */
    private FSDataInputStream openWithLength(String key, long size, String policy) throws IOException {
        try {
            return fs.openFile(path(key)).opt("fs.option.openfile.read.policy", policy)
                .opt("fs.option.openfile.length", Long.toString(size)).build().get();
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof IOException) {
                throw (IOException) e.getCause();
            }
            throw new IOException(e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new java.io.InterruptedIOException("interrupted while opening " + key);
        }
    }
}
