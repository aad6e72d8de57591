package lakelog.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Reads the `.log` objects of one split ahead of the decoder, on `lanes` background threads per
 * reader: segment k is read by lane k mod lanes, so while {@link SegmentScanner} decodes segment k,
 * segments k+1 .. k+lanes are opened (on S3: the offset index's GET when the split starts inside
 * one, then the `.log` GET) and their bytes transferred at the same time, and a task waits for the
 * store only when it outruns it. With one lane the next segment's round trip and transfer overlap
 * the decoding; with more, the transfers overlap each other too (as S3A's vectored reads do for
 * Parquet), which is what a store with per-request latency (S3) needs.
 *
 * <p>Bounded: each lane allocates at most {@code depth} + 1 chunk arrays of at most {@code chunkBytes}
 * (queued, being filled, being consumed; recycled through the lane's free list, and a lane waits
 * for one to come back before reading on): at most lanes x (depth + 1) x chunkBytes per task,
 * whatever the segments' size. Order: the items
 * of segment k (a header with its start position, its chunks, an end mark) all come, in its lane,
 * before those of k+lanes, and the consumer takes segment k from lane k mod lanes. An error of a
 * lane's thread (a missing object, an I/O failure) is queued in its place and thrown by the
 * consumer when it reaches that segment, as if the consumer had read the object itself: the
 * object's bytes and the checks on them are exactly those of the inline path. Closing a segment's
 * stream before its end (a scan that stopped at its last wanted offset) tells its lane to stop
 * reading that object. One producer thread per lane, one consumer thread (the task's).
 */
final class Prefetcher implements AutoCloseable {
    /** Opens segment `index` of the split: its stream positioned at `from` and the bytes to read. */
    interface Opener {
        Opened open(int index) throws IOException;
    }

    static final class Opened {
        final InputStream in;
        final long from, size;

        Opened(InputStream in, long from, long size) {
            this.in = in;
            this.from = from;
            this.size = size;
        }
    }

    /** One segment's bytes as the consumer sees them. */
    final class Segment extends InputStream {
        final int index;
        final long from, size;    // the bytes [from, size) of the object
        private final Lane lane;
        private byte[] chunk;
        private int at, length;
        private boolean ended;

        private Segment(int index, long from, long size, Lane lane) {
            this.index = index;
            this.from = from;
            this.size = size;
            this.lane = lane;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            return read(one, 0, 1) < 0 ? -1 : one[0] & 0xFF;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (len == 0) {
                return 0;
            }
            while (chunk == null || at == length) {
                if (ended) {
                    return -1;
                }
                recycle();
                Item item = lane.take();
                if (item.segment != index) {
                    throw new IllegalStateException("prefetch out of order: segment " + item.segment + " in " + index);
                }
                if (item.end) {
                    ended = true;
                    return -1;
                }
                chunk = item.data;
                at = 0;
                length = item.length;
            }
            int n = Math.min(len, length - at);
            System.arraycopy(chunk, at, b, off, n);
            at += n;
            return n;
        }

        private void recycle() {
            if (chunk != null) {
                lane.free.offer(chunk);
                chunk = null;
            }
        }

        /** Skips what is left of this segment (and asks the thread to stop reading it). */
        @Override
        public void close() throws IOException {
            if (ended || closed) {
                return;
            }
            skip = index;
            recycle();
            while (!ended) {
                Item item = lane.take();
                if (item.data != null) {
                    lane.free.offer(item.data);
                }
                ended = item.end;
            }
        }
    }

    private static final class Item {
        final int segment;
        final long from;          // header: the segment's start position
        final long size;          // header: the position its read ends at
        final byte[] data;        // a chunk (null for a header or an end mark)
        final int length;
        final boolean header, end;
        final Throwable error;

        Item(int segment, long from, byte[] data, int length, boolean header, boolean end, Throwable error) {
            this(segment, from, 0, data, length, header, end, error);
        }

        Item(int segment, long from, long size, byte[] data, int length, boolean header, boolean end, Throwable error) {
            this.segment = segment;
            this.from = from;
            this.size = size;
            this.data = data;
            this.length = length;
            this.header = header;
            this.end = end;
            this.error = error;
        }
    }

    /** How long the consumer waits for one item before checking that the thread is still alive. */
    private static final long POLL_MS = 1000;

    private final int count;
    private final int chunkBytes;
    private final Opener opener;
    private final Lane[] lanes;
    private volatile boolean closed;
    private volatile int skip = -1;   // the segment the consumer closed early (one at a time)
    private int next;                 // the consumer's next segment

    /**
     * @param count segments in the split
     * @param lanes segments read at once (at least 1)
     * @param depth chunks that may wait in each lane's queue (at least 1)
     */
    Prefetcher(String name, int count, int lanes, int depth, int chunkBytes, Opener opener) {
        this.count = count;
        this.chunkBytes = chunkBytes;
        this.opener = opener;
        this.lanes = new Lane[Math.max(1, Math.min(lanes, count))];
        for (int i = 0; i < this.lanes.length; i++) {
            this.lanes[i] = new Lane(i, depth, "lakelog-prefetch " + name + " lane " + i);
        }
        for (Lane lane : this.lanes) {
            lane.thread.start();
        }
    }

    /** The next segment's stream, or null after the last; throws what opening it threw. */
    Segment next() throws IOException {
        if (next >= count) {
            return null;
        }
        Lane lane = lanes[next % lanes.length];
        Item item = lane.take();
        if (!item.header || item.segment != next) {
            throw new IllegalStateException("prefetch out of order: expected the start of segment " + next);
        }
        return new Segment(next++, item.from, item.size, lane);
    }

    private static void rethrow(Throwable t) throws IOException {
        if (t instanceof IOException) {
            throw (IOException) t;
        }
        if (t instanceof RuntimeException) {
            throw (RuntimeException) t;
        }
        if (t instanceof Error) {
            throw (Error) t;
        }
        throw new IOException(t);
    }

    /** One background thread reading segments first, first + lanes, ... into its own queue. */
    private final class Lane {
        final int first;
        final BlockingQueue<Item> queue;
        final BlockingQueue<byte[]> free;
        final Thread thread;
        private int allocate;         // size of the last chunk allocated: chunks only grow, so they recycle
        private int allocated;        // chunk arrays of this lane alive (queued, filled, consumed, free)
        private final int maxChunks;

        Lane(int first, int depth, String name) {
            this.first = first;
            this.maxChunks = depth + 1;
            // a header and an end mark per segment besides the chunks: room for them too
            this.queue = new ArrayBlockingQueue<>(depth + 2);
            this.free = new ArrayBlockingQueue<>(depth + 2);
            this.thread = new Thread(this::run, name);
            thread.setDaemon(true);
        }

        Item take() throws IOException {
            while (true) {
                Item item;
                try {
                    item = queue.poll(POLL_MS, TimeUnit.MILLISECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new InterruptedIOException("interrupted while waiting for remote bytes");
                }
                if (item != null) {
                    if (item.error != null) {
                        rethrow(item.error);
                    }
                    return item;
                }
                if (!thread.isAlive() && queue.isEmpty()) {
                    throw new IOException("the prefetch thread ended without an answer");
                }
            }
        }

        private void put(Item item) throws InterruptedException {
            while (!closed) {
                if (queue.offer(item, POLL_MS, TimeUnit.MILLISECONDS)) {
                    return;
                }
            }
            throw new InterruptedException("closed");
        }

        private void run() {
            int index = first;
            try {
                for (; index < count && !closed; index += lanes.length) {
                    Opened o = opener.open(index);
                    try (InputStream in = o.in) {
                        put(new Item(index, o.from, o.size, null, 0, true, false, null));
                        long remaining = o.size - o.from;
                        while (remaining > 0 && skip != index && !closed) {
                            byte[] chunk = free.poll();
                            while (chunk == null && allocated >= maxChunks && skip != index && !closed) {
                                chunk = free.poll(POLL_MS, TimeUnit.MILLISECONDS);  // the consumer recycles
                            }
                            if (chunk == null && allocated >= maxChunks) {
                                break;  // skipped or closed while waiting
                            }
                            if (chunk != null && chunk.length < Math.min(chunkBytes, remaining)) {
                                chunk = null;  // too small for this segment: dropped
                                allocated--;
                            }
                            if (chunk == null) {
                                allocate = (int) Math.min(chunkBytes, Math.max(remaining, allocate));
                                chunk = new byte[allocate];
                                allocated++;
                            }
                            int want = (int) Math.min(chunk.length, remaining);
                            int n = 0;
                            try {
                                while (n < want) {
                                    int r = in.read(chunk, n, want - n);
                                    if (r < 0) {
                                        break;
                                    }
                                    n += r;
                                }
                            } catch (IOException e) {
                                if (skip == index) {
                                    break;  // the rest of this object is not wanted: as inline, never read
                                }
                                throw e;
                            }
                            if (n > 0) {
                                put(new Item(index, 0, chunk, n, false, false, null));
                            }
                            if (n < want) {
                                break;  // the object ended early: the scanner reports it, as inline
                            }
                            remaining -= n;
                        }
                    }
                    put(new Item(index, 0, null, 0, false, true, null));
                }
            } catch (InterruptedException e) {
                // closed: nobody waits for the rest
            } catch (Throwable t) {
                try {
                    put(new Item(index, 0, null, 0, false, false, t));
                } catch (InterruptedException e) {
                    // closed
                }
            }
        }
    }

    /** Stops the threads (each may finish a read in flight on its own: they are daemons). */
    @Override
    public void close() {
        closed = true;
        for (Lane lane : lanes) {
            lane.thread.interrupt();
        }
        for (Lane lane : lanes) {
            try {
                lane.thread.join(POLL_MS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
