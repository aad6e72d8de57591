"""Transactions (Kafka's KIP-98): the transaction coordinator of the `__transaction_state` partitions.

  * `state_codec` — the byte layout of the records of `__transaction_state`.
  * `coordinator` — the transaction state machine (InitProducerId, AddPartitionsToTxn, EndTxn,
                    timeouts, markers written), pure: events in, records to persist and markers out.
  * `service`     — the coordinator on a node: loading on leadership, appending with acks=all,
                    writing the markers to each partition's leader, timers, routing between nodes.
  * `errors`      — the transaction errors (one tree under `TransactionError`).
"""
