"""Schema references resolved for Spark (pure): what `from_avro` and `json_schema_type` need when a
registry schema names types held by other subjects.

Confluent's references are `{"name", "subject", "version"}` entries next to a schema; `name` is how
the schema refers to the other one:

- **Avro**: the full name of a named type (record, enum, fixed) defined by the referenced schema.
  `from_avro` takes one self-contained schema text, so `inline_avro` rewrites the schema with each
  referenced definition written out in place of its first use (Avro's rule: a named type is
  defined once, then used by name), its namespace made explicit (`""` for the null namespace, as
  the Avro specification allows) so that the enclosing namespace cannot change its full name.
  References of references are inlined the same way, each definition once.
- **JSON Schema**: the URI in a `$ref` (`"address.json"`, `"address.json#/definitions/Street"`).
  `json_ref_target` resolves such a `$ref` against the referenced documents: by the exact name,
  else by the last path segment (a `$ref` relative to the referring schema's `$id`), then the
  fragment as a JSON Pointer inside that document.
- **Protobuf**: an import path; the descriptors of the imports are fetched serialized
  (`schema_columns.RegistryReader.descriptor_set`), nothing to rewrite.
"""

from __future__ import annotations

import copy
from typing import Any

AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
MAX_DEPTH = 64


class SchemaReferenceError(ValueError):
    """A referenced schema cannot be resolved (missing, or nested past MAX_DEPTH)."""


def avro_full_name(doc: dict, enclosing_ns: str | None) -> tuple[str, str | None]:
    """(full name, namespace) of a named Avro type definition inside namespace `enclosing_ns`."""
    name = str(doc.get("name", ""))
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = doc.get("namespace", enclosing_ns)
    ns = ns or None
    return (f"{ns}.{name}" if ns else name), ns


def inline_avro(schema: Any, named: dict[str, Any]) -> Any:
    """`schema` (parsed Avro JSON) with every referenced named type of `named` (full name -> its
    parsed definition) written out at its first use. Names that are neither defined in the schema
    nor in `named` are left as they are (the Avro parser then reports them)."""
    defined: set[str] = set()
    return _walk(copy.deepcopy(schema), None, named, defined, 0)


def _walk(node: Any, ns: str | None, named: dict[str, Any], defined: set[str], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise SchemaReferenceError("Avro schema references nest too deeply")
    if isinstance(node, str):
        if node in AVRO_PRIMITIVES:
            return node
        full = node if "." in node or not ns else f"{ns}.{node}"
        for candidate in (full, node):
            if candidate in defined:
                return node
            if candidate in named:
                definition = copy.deepcopy(named[candidate])
                if not isinstance(definition, dict):
                    raise SchemaReferenceError(f"reference {candidate} is not a named Avro type")
                own, own_ns = avro_full_name(definition, None)
                definition["name"] = own.rsplit(".", 1)[-1]
                definition["namespace"] = own_ns or ""
                return _walk(definition, own_ns, named, defined, depth + 1)
        return node
    if isinstance(node, list):
        return [_walk(b, ns, named, defined, depth + 1) for b in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in NAMED:
        full, inner_ns = avro_full_name(node, ns)
        defined.add(full)
        if kind in ("record", "error"):
            for f in node.get("fields", []):
                if isinstance(f, dict) and "type" in f:
                    f["type"] = _walk(f["type"], inner_ns, named, defined, depth + 1)
        return node
    if kind == "array" and "items" in node:
        node["items"] = _walk(node["items"], ns, named, defined, depth + 1)
    elif kind == "map" and "values" in node:
        node["values"] = _walk(node["values"], ns, named, defined, depth + 1)
    elif isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in AVRO_PRIMITIVES
                                            and kind not in ("array", "map")):
        node["type"] = _walk(kind, ns, named, defined, depth + 1)
    return node


def json_pointer(doc: Any, fragment: str) -> Any:
    """The node of `doc` at the JSON Pointer `fragment` ("" or "/" is the document); None if absent."""
    node = doc
    for part in fragment.split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def json_ref_target(ref: str, root: Any, refs: dict[str, Any]) -> tuple[Any, Any]:
    """(target node, the document it lives in) of a `$ref` inside document `root`; (None, root)
    when it cannot be resolved. `refs`: reference name -> parsed referenced document."""
    base, _, fragment = ref.partition("#")
    if not base:
        return json_pointer(root, fragment), root
    doc = refs.get(base)
    if doc is None:
        last = base.rstrip("/").rsplit("/", 1)[-1]
        matches = [d for name, d in refs.items() if name.rstrip("/").rsplit("/", 1)[-1] == last]
        doc = matches[0] if len(matches) == 1 else None
    if doc is None:
        return None, root
    return json_pointer(doc, fragment), doc
