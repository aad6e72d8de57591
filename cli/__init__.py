"""The top floor: the `lakelog` command line, the HTTP client it speaks with, the Python client
(`Producer`, `Consumer`), and the local cluster launcher. Imports every layer below; nothing imports it."""

from __future__ import annotations

from typing import Any

__all__ = ["Consumer", "Producer", "RecordMetadata"]


def __getattr__(name: str) -> Any:  # lazy: `lakelog` commands that do not produce skip the import
    if name in ("Producer", "RecordMetadata", "ProduceError"):
        from lakelog.cli import producer
        return getattr(producer, name)
    if name in ("Consumer", "Message"):
        from lakelog.cli import consumer
        return getattr(consumer, name)
    raise AttributeError(name)
