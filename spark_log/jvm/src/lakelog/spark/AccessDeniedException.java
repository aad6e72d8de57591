package lakelog.spark;

/** A SQL server client's query reads what its principal may not (see {@link SqlAccess}). */
public final class AccessDeniedException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    AccessDeniedException(String message) {
        super("ACCESS_DENIED: " + message);
    }
}
