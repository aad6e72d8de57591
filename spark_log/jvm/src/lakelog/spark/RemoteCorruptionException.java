package lakelog.spark;

/**
 * A remote object (or a fetched batch) fails its checks: framing, CRC-32C, offsets outside the
 * segment or not increasing, a malformed record behind a valid CRC, a codec payload that does not
 * inflate, a torn tail. Names the object key and the byte position of the batch, as the Python
 * reader's {@code RemoteCorruptionError} does. The query fails; no row of a bad batch is returned.
 */
public final class RemoteCorruptionException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String key;
    private final long position;

    public RemoteCorruptionException(String key, long position, String message) {
        super("RemoteCorruptionError: " + message + (position >= 0 ? " (object " + key + ", position " + position + ")"
                                                                   : " (object " + key + ")"));
        this.key = key;
        this.position = position;
    }

    /** The object key (relative to the remote root), or "fetch of topic-partition" for the hot tail. */
    public String key() {
        return key;
    }

    /** Byte position of the bad batch in the object, -1 when the whole object is bad. */
    public long position() {
        return position;
    }
}
