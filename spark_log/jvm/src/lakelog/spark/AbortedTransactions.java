package lakelog.spark;

import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.Set;

/**
 * Which batches belong to aborted transactions, told batch by batch in offset order
 * (logstore/read_committed.py's `AbortedTransactions`, the walk Kafka's consumer does with a
 * fetch's aborted-transaction list): a producer's transaction counts as aborted from its listed
 * first offset until its ABORT marker; its transactional batches in between are left out. The
 * walk may start inside a transaction. Not thread-safe: one per scanner.
 */
final class AbortedTransactions {
    /** Control record key: version i16, type i16 (0 ABORT, 1 COMMIT). */
    static final int ABORT = 0;

    private final Aborted[] pending;
    private int next;
    private final Set<Long> aborting = new HashSet<>();

    AbortedTransactions(Aborted[] aborted) {
        pending = aborted.clone();
        Arrays.sort(pending, Comparator.comparingLong(a -> a.firstOffset));
    }

    /** Whether the batch [baseOffset, lastOffset] of `producerId` is a data batch of an aborted
     *  transaction. A control batch never is; `markerType` (its control record's type, asked only
     *  when needed) ends its producer's aborted transaction when it is ABORT. */
    boolean isAborted(long baseOffset, long lastOffset, long producerId, boolean transactional, boolean control,
                      java.util.function.IntSupplier markerType) {
        while (next < pending.length && pending[next].firstOffset <= lastOffset) {
            Aborted a = pending[next++];
            if (a.lastOffset >= baseOffset) {  // else its marker lies behind the walk: over
                aborting.add(a.producerId);
            }
        }
        if (control) {
            if (aborting.contains(producerId) && markerType.getAsInt() == ABORT) {
                aborting.remove(producerId);
            }
            return false;
        }
        return transactional && aborting.contains(producerId);
    }
}
