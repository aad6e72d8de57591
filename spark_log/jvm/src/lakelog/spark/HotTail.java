package lakelog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The nodes' part of a topic (spark_log/hot_tail.py in the JVM): what the remote tier does not
 * hold yet, read over the binary fetch path (`Accept: application/vnd.kafka.recordbatch`, batches
 * byte for byte as stored, each CRC-checked here by {@link SegmentScanner}). A task reads its
 * partition's log start offset and high watermark once when it starts and reads from its first
 * offset (or the log start, if higher) below that high watermark. With read_committed (the
 * default) the bound is the last stable offset instead and each fetch asks for
 * `isolation=read_committed`: the node answers whole batches below the LSO with the batches of
 * aborted transactions left out, and the read goes on at the answer's `X-Lakelog-Next-Offset`
 * (past batches the node left out, even when it left out all of them). A node that cannot serve the
 * range yet (a new leader) is asked again for up to 30 s. Credentials: `apiKey` (bearer), or
 * `user` / `password` (basic), from the options or $LAKELOG_API_KEY / $LAKELOG_USER /
 * $LAKELOG_PASSWORD.
 */
final class HotTail {
    static final String RECORDBATCH = "application/vnd.kafka.recordbatch";
    static final int FETCH_BYTES = 8 * 1024 * 1024;
    static final long READ_TIMEOUT_MS = 30_000;
    private static final ObjectMapper JSON = new ObjectMapper();

    /** The nodes could not serve the part of a topic the remote tier does not hold. */
    static final class HotTailException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        HotTailException(String message) {
            super("HotTailError: " + message);
        }
    }

    private final Options o;
    private final HttpClient http;

    HotTail(Options o) {
        this.o = o;
        this.http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    }

    /** The nodes' base URLs: `nodes` is comma-separated, as the Python reader takes it (any node
     *  serves any request: one that cannot be reached is skipped for the next). */
    private List<String> bases() {
        List<String> out = new ArrayList<>();
        for (String part : o.nodes.split(",")) {
            String u = part.trim();
            while (u.endsWith("/")) {
                u = u.substring(0, u.length() - 1);
            }
            if (!u.isEmpty()) {
                out.add(u);
            }
        }
        return out;
    }

    private HttpResponse<byte[]> get(String path, String accept) {
        for (String base : bases()) {
            HttpResponse<byte[]> r = getFrom(base, path, accept);
            if (r != null) {
                return r;
            }
        }
        return null;
    }

    private HttpResponse<byte[]> getFrom(String base, String path, String accept) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + path)).timeout(Duration.ofSeconds(30)).GET();
        if (accept != null) {
            b.header("Accept", accept);
        }
        if (o.apiKey != null) {
            b.header("Authorization", "Bearer " + o.apiKey);
        } else if (o.user != null) {
            String pw = o.password == null ? "" : o.password;
            b.header("Authorization", "Basic " + Base64.getEncoder().encodeToString(
                (o.user + ":" + pw).getBytes(StandardCharsets.UTF_8)));
        }
        try {
            return http.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
        } catch (IOException e) {
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new HotTailException("interrupted");
        }
    }

    private JsonNode json(String path, String what) {
        HttpResponse<byte[]> r = get(path, null);
        if (r == null) {
            throw new HotTailException("cannot reach " + o.nodes);
        }
        check(r, what);
        try {
            return JSON.readTree(r.body());
        } catch (IOException e) {
            throw new HotTailException(what + ": not JSON: " + e.getMessage());
        }
    }

    private static void check(HttpResponse<byte[]> r, String what) {
        if (r.statusCode() >= 400) {
            String message = new String(r.body(), StandardCharsets.UTF_8);
            try {
                JsonNode m = JSON.readTree(r.body()).get("message");
                if (m != null) {
                    message = m.asText();
                }
            } catch (IOException | RuntimeException ignored) {
                // the body is not JSON: keep it as text
            }
            message = message.strip();
            throw new HotTailException(what + ": HTTP " + r.statusCode() + ": "
                                       + message.substring(0, Math.min(300, message.length())));
        }
    }

    static String quote(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
    }

    /** The topic's partition numbers, as the nodes list them. */
    static List<Integer> partitionIds(Options o, String topic) {
        JsonNode list = new HotTail(o).json("/topics/" + quote(topic) + "/partitions", "partitions of " + topic);
        List<Integer> out = new ArrayList<>();
        for (JsonNode d : list) {
            out.add(d.get("partition").asInt());
        }
        Collections.sort(out);
        return out;
    }

    private static long parseOffset(String v) {
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    /** Rows of `hot` into `cols`, the batches of one fetch at a time (see {@link #next}). */
    final class Reader {
        private final Split.Hot hot;
        private final String where;
        private long offset;
        private long endOffset;  // exclusive: the high watermark or LSO (or to + 1)
        private long nextOffset;  // the last answer's X-Lakelog-Next-Offset (-1: none)
        private SegmentScanner scanner;

        Reader(Split.Hot hot) {
            this.hot = hot;
            this.where = o.topic + "-" + hot.partition;
            JsonNode b = json("/topics/" + quote(o.topic) + "/partitions/" + hot.partition + "/offsets",
                              "offsets of " + where);
            long logStart = b.get("beginning_offset").asLong();
            long hw = b.get("end_offset").asLong();
            JsonNode lso = b.get("last_stable_offset");
            if (o.readCommitted && lso != null) {
                hw = Math.min(hw, lso.asLong());
            }
            offset = Math.max(hot.from, logStart);
            endOffset = hot.to == Long.MAX_VALUE ? hw : Math.min(hw, hot.to + 1);
        }

        /** Fill `cols` up to `targetRows`; false when the range is read. */
        boolean fill(Columns cols, int targetRows) throws IOException {
            while (cols.rows < targetRows) {
                if (scanner != null) {
                    boolean more = scanner.fill(cols, targetRows);
                    if (more) {
                        return true;
                    }
                    offset = Math.max(Math.max(offset, scanner.lastOffset() + 1), nextOffset);
                    scanner = null;
                    continue;
                }
                if (offset >= endOffset) {
                    return false;
                }
                byte[] data = fetch();
                if (data.length == 0) {  // every batch of the answer was an aborted transaction's
                    offset = nextOffset;
                    continue;
                }
                String key = "fetch of " + where;
                scanner = new SegmentScanner(key, new ByteArrayInputStream(data), 0, data.length, Long.MIN_VALUE,
                                             Long.MAX_VALUE, offset, endOffset - 1, hot.minTs, hot.maxTs,
                                             Math.max(data.length, SegmentScanner.LOG_OVERHEAD));
            }
            return true;
        }

        private byte[] fetch() {
            String path = "/topics/" + quote(o.topic) + "/partitions/" + hot.partition + "/records?offset=" + offset
                          + "&max_bytes=" + FETCH_BYTES + "&timeout=0" + (o.readCommitted ? "&isolation=read_committed" : "");
            long deadline = System.currentTimeMillis() + READ_TIMEOUT_MS;
            String reason = "";
            while (true) {
                HttpResponse<byte[]> r = get(path, RECORDBATCH);
                nextOffset = r == null ? -1 : r.headers().firstValue("X-Lakelog-Next-Offset").map(HotTail::parseOffset)
                                                                                              .orElse(-1L);
                if (r != null && r.statusCode() == 200 && (r.body().length > 0 || nextOffset > offset)) {
                    return r.body();
                }
                if (r != null && r.statusCode() != 200 && r.statusCode() < 500) {
                    check(r, "fetch of " + where + " at offset " + offset);
                }
                reason = r != null ? "HTTP " + r.statusCode() : "cannot reach " + o.nodes;
                if (System.currentTimeMillis() >= deadline) {
                    throw new HotTailException("fetch of " + where + " at offset " + offset + ": no data below the high "
                                               + "watermark " + endOffset + " within " + READ_TIMEOUT_MS / 1000 + "s ("
                                               + reason + ")");
                }
                try {
                    Thread.sleep(200);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new HotTailException("interrupted");
                }
            }
        }
    }
}
