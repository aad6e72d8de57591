package lakelog.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Reads the `.log` objects of one split ahead of the decoder, on one background thread per
 * reader: while {@link SegmentScanner} decodes segment k, segment k+1 is opened (on S3A: its HEAD
 * and GET round trips, and the offset index's GET when the split starts inside it) and its bytes
 * are read, so a task waits for the store only when it outruns it. Before this, each segment's
 * round trips and transfer were paid in series with the decoding of the previous one.
 *
 * <p>Bounded: at most {@code depth} + 2 chunks of at most {@code chunkBytes} wait in the queue,
 * plus the one being filled and the one being consumed (chunk arrays are recycled). Order: the items of
 * segment k (a header with its start position, its chunks, an end mark) all come before those of
 * k+1. An error of the background thread (a missing object, an I/O failure) is queued in its place
 * and thrown by the consumer when it reaches that point, as if the consumer had read the object
 * itself: the object's bytes and the checks on them are exactly those of the inline path. Closing
 * a segment's stream before its end (a scan that stopped at its last wanted offset) tells the
 * thread to stop reading that object. One producer thread, one consumer thread (the task's).
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
        final long from;
        private byte[] chunk;
        private int at, length;
        private boolean ended;

        private Segment(int index, long from) {
            this.index = index;
            this.from = from;
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
                Item item = take();
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
                free.offer(chunk);
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
                Item item = take();
                if (item.data != null) {
                    free.offer(item.data);
                }
                ended = item.end;
            }
        }
    }

    private static final class Item {
        final int segment;
        final long from;          // header: the segment's start position
        final byte[] data;        // a chunk (null for a header or an end mark)
        final int length;
        final boolean header, end;
        final Throwable error;

        Item(int segment, long from, byte[] data, int length, boolean header, boolean end, Throwable error) {
            this.segment = segment;
            this.from = from;
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
    private final BlockingQueue<Item> queue;
    private final BlockingQueue<byte[]> free;
    private final Thread thread;
    private volatile boolean closed;
    private volatile int skip = -1;
    private int next;                 // the consumer's next segment
    private int allocate;             // size of the last chunk allocated: chunks only grow, so they recycle

    /**
     * @param count segments in the split
     * @param depth chunks that may wait in the queue (at least 1)
     */
    Prefetcher(String name, int count, int depth, int chunkBytes, Opener opener) {
        this.count = count;
        this.chunkBytes = chunkBytes;
        this.opener = opener;
        // a header and an end mark per segment besides the chunks: room for them too
        this.queue = new ArrayBlockingQueue<>(depth + 2);
        this.free = new ArrayBlockingQueue<>(depth + 2);
        this.thread = new Thread(this::run, "lakelog-prefetch " + name);
        thread.setDaemon(true);
        thread.start();
    }

    /** The next segment's stream, or null after the last; throws what opening it threw. */
    Segment next() throws IOException {
        if (next >= count) {
            return null;
        }
        Item item = take();
        if (!item.header || item.segment != next) {
            throw new IllegalStateException("prefetch out of order: expected the start of segment " + next);
        }
        return new Segment(next++, item.from);
    }

    private Item take() throws IOException {
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

    private void put(Item item) throws InterruptedException {
        while (!closed) {
            if (queue.offer(item, POLL_MS, TimeUnit.MILLISECONDS)) {
                return;
            }
        }
        throw new InterruptedException("closed");
    }

    private void run() {
        int index = 0;
        try {
            for (; index < count && !closed; index++) {
                Opened o = opener.open(index);
                try (InputStream in = o.in) {
                    put(new Item(index, o.from, null, 0, true, false, null));
                    long remaining = o.size - o.from;
                    while (remaining > 0 && skip != index && !closed) {
                        byte[] chunk = free.poll();
                        if (chunk == null || chunk.length < Math.min(chunkBytes, remaining)) {
                            allocate = (int) Math.min(chunkBytes, Math.max(remaining, allocate));
                            chunk = new byte[allocate];
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

    /** Stops the thread (it may finish a read in flight on its own: it is a daemon). */
    @Override
    public void close() {
        closed = true;
        thread.interrupt();
        try {
            thread.join(POLL_MS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
