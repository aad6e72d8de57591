"""What every schema language provides: the `ParsedSchema` interface, the type names, references.

A `ParsedSchema` is what the registry knows about one schema text after its language's library
parsed it: the text kept as the schema (`canonical`), a normalized text (`normalized()`, what
`normalize=true` stores and compares), and `read_errors(writer)`: the reasons this schema, used
as the reader, cannot read data written with `writer` (empty: it can). The compatibility levels
(`compatibility.py`) are built from `read_errors` alone.

References: `parse_schema(schema_type, text, references)` takes the texts of every schema the
text refers to, transitively, dependencies first, as (reference name, schema type, text)
triples; what a name means is the language's business (an Avro named type's full name, a JSON
Schema `$ref` URL, a Protobuf import path).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)  # the order Confluent lists them in GET /schemas/types

Reference = tuple[str, str, str]  # (name, schema type, schema text)


class ParsedSchema(ABC):
    """One parsed schema (immutable)."""

    schema_type: str
    canonical: str

    @abstractmethod
    def normalized(self) -> str:
        """A text equal for schemas that differ only in layout (whitespace, key order, ...)."""

    @abstractmethod
    def read_errors(self, writer: "ParsedSchema") -> list[str]:
        """Why this schema, as the reader, cannot read what `writer` wrote; [] when it can."""


