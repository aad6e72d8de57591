"""Topic name rules, as Kafka's: [a-zA-Z0-9._-]{1,249}, not "." or "..".

A valid name can never reach outside the data directory or the remote prefix.
"""

from __future__ import annotations

import re

from lakelog.ingest_api.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> str:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise InvalidTopicError(f"topic name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'")
    return name
