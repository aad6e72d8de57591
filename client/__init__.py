"""The Python client of Lakelog, its public API: `Producer`, `Consumer` and `AdminClient`.

    from lakelog.client import AdminClient, Consumer, Producer

`Producer` (client/producer.py) writes records as Kafka's producer does (batching, linger,
idempotence, compression); `Consumer` (client/consumer.py) reads as a group member or by assignment;
`AdminClient` (client/admin.py) manages topics, their configs and consumer groups. All three speak
a node's HTTP API. The result and error types a caller handles are here too. This module is the
package's one deliberate re-export (the names load on first use, so a command that needs none of
them does not pay for their imports); code inside the project imports the defining modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name loads on first use
    from lakelog.client.admin import AdminClient
    from lakelog.client.consumer import ConsumeError, Consumer
    from lakelog.client.fetching import Message
    from lakelog.client.node_client import ClientError, ClientSecurity
    from lakelog.client.producer import Producer
    from lakelog.client.producer_batch import ProduceError, RecordMetadata
    from lakelog.client.producer_transactions import TransactionError

#: Public name -> the module that defines it.
_DEFINED_IN = {
    "Producer": "lakelog.client.producer",
    "RecordMetadata": "lakelog.client.producer_batch",
    "ProduceError": "lakelog.client.producer_batch",
    "TransactionError": "lakelog.client.producer_transactions",
    "Consumer": "lakelog.client.consumer",
    "ConsumeError": "lakelog.client.consumer",
    "Message": "lakelog.client.fetching",
    "AdminClient": "lakelog.client.admin",
    "ClientSecurity": "lakelog.client.node_client",
    "ClientError": "lakelog.client.node_client",
}

__all__ = sorted(_DEFINED_IN)


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module 'lakelog.client' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
