"""JSON Schema, checked by the `jsonschema` library, compared by Confluent's JSON Schema rules.

Parsing: the text must be JSON (an object or a boolean); `jsonschema.validators.validator_for`
picks the draft from `$schema` (draft 7 when absent, Confluent's default) and `check_schema`
validates the schema against its metaschema. Every `$ref` must resolve: within the document
(`#/...`), or to a reference whose name is the `$ref` URL (before any `#`).

Reader rules (`read_errors`): the diff of Confluent's `SchemaDiff` from the writer (original) to
the reader (update), in its strict mode; a change is incompatible unless it is one of the kinds
Confluent lists as compatible. Implemented: types (extension, `integer` → `number`), string and
numeric bounds, `pattern`, `enum`, `const`, objects (properties added or removed under open and
closed content models, `required`, `additionalProperties`, property counts), arrays (`items`,
item counts, `uniqueItems`), `anyOf` / `oneOf` (sum types: each writer branch must be readable by
some reader branch) and `allOf` (product types: the reader may not add members), `$ref` followed
on both sides (a pair already being compared counts as compatible, which ends recursion).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from lakelog.ingest_api.schemas.errors import InvalidSchemaError
from lakelog.ingest_api.schemas.parsed import JSON, ParsedSchema, Reference

MAX_REF_DEPTH = 64  # $ref chains followed while comparing


class JsonSchema(ParsedSchema):
    schema_type = JSON

    def __init__(self, canonical: str, doc: Any, refs: dict[str, Any]) -> None:
        self.canonical = canonical
        self.doc = doc
        self.refs = refs  # reference name -> parsed document

    def normalized(self) -> str:
        return json.dumps(self.doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"a {writer.schema_type} schema is not a JSON schema"]
        diff = _Diff(writer, self)
        diff.compare(writer.doc, self.doc, "#", 0)
        return diff.errors


def parse_json_schema(text: str, references: Sequence[Reference]) -> JsonSchema:
    refs: dict[str, Any] = {}
    try:
        for name, schema_type, ref_text in references:
            if schema_type != JSON:
                raise InvalidSchemaError(f"Invalid schema: reference {name!r} is {schema_type}, not JSON")
            refs[name] = json.loads(ref_text)
        doc = json.loads(text)
        if not isinstance(doc, (dict, bool)):
            raise InvalidSchemaError("Invalid schema: a JSON Schema is an object or a boolean")
        cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator)
        cls.check_schema(doc)
        _check_refs(doc, doc, refs, 0)
    except InvalidSchemaError:
        raise
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply") from None
    except jsonschema.exceptions.SchemaError as e:
        raise InvalidSchemaError(f"Invalid schema: {e.message}") from None
    except (ValueError, TypeError) as e:
        raise InvalidSchemaError(f"Invalid schema {text[:200]!r}: {e}") from None
    return JsonSchema(json.dumps(doc, separators=(",", ":"), ensure_ascii=False), doc, refs)


def _check_refs(node: Any, root: Any, refs: dict[str, Any], depth: int) -> None:
    if depth > 200:
        raise InvalidSchemaError("Invalid schema: nested too deeply")
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and _resolve(ref, root, refs) is _MISSING:
            raise InvalidSchemaError(f"Invalid schema: $ref {ref!r} resolves to nothing (not in the document "
                                     f"nor a reference's name)")
        for k, v in node.items():
            if k not in ("enum", "const", "default", "examples"):
                _check_refs(v, root, refs, depth + 1)
    elif isinstance(node, list):
        for v in node:
            _check_refs(v, root, refs, depth + 1)


_MISSING = object()


def _resolve(ref: str, root: Any, refs: dict[str, Any]) -> Any:
    url, _, fragment = ref.partition("#")
    doc = root if url == "" else refs.get(url, _MISSING)
    if doc is _MISSING and url:
        # `$ref` may name a reference by the last segment of its URL
        doc = next((d for n, d in refs.items() if n.rsplit("/", 1)[-1] == url.rsplit("/", 1)[-1]), _MISSING)
    if doc is _MISSING:
        return _MISSING
    if fragment in ("", "/"):
        return doc
    if not fragment.startswith("/"):
        return _MISSING  # anchors are not resolved
    for part in fragment[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return _MISSING
    return doc


_NUMERIC_BOUNDS = (  # keyword, direction in which a change narrows what the reader accepts
    ("maxLength", "down"), ("minLength", "up"), ("maximum", "down"), ("minimum", "up"),
    ("exclusiveMaximum", "down"), ("exclusiveMinimum", "up"), ("maxProperties", "down"),
    ("minProperties", "up"), ("maxItems", "down"), ("minItems", "up"),
)


def _types(node: dict) -> set[str] | None:
    t = node.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _open(node: dict) -> bool:
    """An open content model: additional properties allowed (absent or true) and no patternProperties."""
    ap = node.get("additionalProperties", True)
    return ap is True and not node.get("patternProperties")


class _Diff:
    def __init__(self, writer: JsonSchema, reader: JsonSchema) -> None:
        self.writer, self.reader = writer, reader
        self.errors: list[str] = []
        self._seen: set[tuple[int, int]] = set()

    def _bad(self, kind: str, path: str) -> None:
        self.errors.append(f"{kind} at {path}")

    def _deref(self, node: Any, side: JsonSchema, depth: int) -> Any:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < MAX_REF_DEPTH:
            target = _resolve(node["$ref"], side.doc, side.refs)
            if target is _MISSING:
                return node
            node, depth = target, depth + 1
        return node

    def compare(self, old: Any, new: Any, path: str, depth: int) -> None:
        old = self._deref(old, self.writer, depth)
        new = self._deref(new, self.reader, depth)
        key = (id(old), id(new))
        if key in self._seen or depth > MAX_REF_DEPTH:
            return
        self._seen.add(key)
        if old is True or old == {}:
            if not (new is True or new == {}):
                self._bad("TYPE_NARROWED (the reader no longer accepts everything)", path)
            return
        if new is True or new == {}:
            return
        if new is False:
            if old is not False:
                self._bad("SCHEMA_REMOVED_TO_FALSE", path)
            return
        if old is False or not isinstance(old, dict) or not isinstance(new, dict):
            return
        self._combined(old, new, path, depth)
        ot, nt = _types(old), _types(new)
        if nt is not None:
            if nt is not None:
                writer_types = ot if ot is not None else {"any"}
                missing = {t for t in writer_types if t not in nt and not (t == "integer" and "number" in nt)}
                if missing:
                    self._bad(f"TYPE_NARROWED (types {sorted(missing)} no longer accepted)", path)
        for kw, direction in _NUMERIC_BOUNDS:
            o, n = old.get(kw), new.get(kw)
            if n is None or isinstance(n, bool) or not isinstance(n, (int, float)):
                continue
            if o is None or isinstance(o, bool) or not isinstance(o, (int, float)):
                self._bad(f"{_snake(kw)}_ADDED", path)
            elif (direction == "down" and n < o) or (direction == "up" and n > o):
                self._bad(f"{_snake(kw)}_{'DECREASED' if direction == 'down' else 'INCREASED'}", path)
        if "multipleOf" in new:
            o, n = old.get("multipleOf"), new["multipleOf"]
            if o is None:
                self._bad("MULTIPLE_OF_ADDED", path)
            elif isinstance(o, (int, float)) and isinstance(n, (int, float)) and n != 0 and (o / n) != int(o / n):
                self._bad("MULTIPLE_OF_EXPANDED", path)
        if "pattern" in new and new.get("pattern") != old.get("pattern"):
            self._bad("PATTERN_ADDED" if "pattern" not in old else "PATTERN_CHANGED", path)
        if "enum" in new and isinstance(new["enum"], list):
            if "enum" not in old:
                self._bad("ENUM_ARRAY_ADDED", path)
            elif isinstance(old["enum"], list) and any(v not in new["enum"] for v in old["enum"]):
                self._bad("ENUM_ARRAY_NARROWED", path)
        if "const" in new and old.get("const", _MISSING) != new["const"]:
            self._bad("CONST_ADDED" if "const" not in old else "CONST_CHANGED", path)
        if new.get("uniqueItems") is True and old.get("uniqueItems") is not True:
            self._bad("UNIQUE_ITEMS_ADDED", path)
        self._objects(old, new, path, depth)
        self._arrays(old, new, path, depth)

    def _objects(self, old: dict, new: dict, path: str, depth: int) -> None:
        op, np_ = old.get("properties") or {}, new.get("properties") or {}
        if not isinstance(op, dict) or not isinstance(np_, dict):
            return
        oreq = set(old.get("required") or []) if isinstance(old.get("required"), list) else set()
        nreq = set(new.get("required") or []) if isinstance(new.get("required"), list) else set()
        for name, schema in np_.items():
            where = f"{path}/properties/{name}"
            if name in op:
                self.compare(op[name], schema, where, depth + 1)
                if name in nreq and name not in oreq and not (isinstance(schema, dict) and "default" in schema):
                    self._bad("REQUIRED_ATTRIBUTE_ADDED", where)
            elif _open(old):
                if not (schema is True or schema == {}):
                    self._bad("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", where)
            elif name in nreq and not (isinstance(schema, dict) and "default" in schema):
                self._bad("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", where)
            else:
                ap = old.get("additionalProperties")
                if isinstance(ap, dict):  # the writer allowed it through additionalProperties: compare
                    self.compare(ap, schema, where, depth + 1)
        for name, schema in op.items():
            if name in np_:
                continue
            where = f"{path}/properties/{name}"
            if _open(new) or schema is False:
                continue
            nap = new.get("additionalProperties")
            if isinstance(nap, dict):
                self.compare(schema, nap, where, depth + 1)
            else:
                self._bad("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", where)
        oap, nap = old.get("additionalProperties", True), new.get("additionalProperties", True)
        if nap is False and oap is not False:
            self._bad("ADDITIONAL_PROPERTIES_REMOVED", path)
        elif isinstance(nap, dict) and oap is True:
            self._bad("ADDITIONAL_PROPERTIES_NARROWED", path)
        elif isinstance(nap, dict) and isinstance(oap, dict):
            self.compare(oap, nap, f"{path}/additionalProperties", depth + 1)

    def _arrays(self, old: dict, new: dict, path: str, depth: int) -> None:
        oi, ni = old.get("items"), new.get("items")
        if isinstance(ni, (dict, bool)):
            self.compare(oi if isinstance(oi, (dict, bool)) else True, ni, f"{path}/items", depth + 1)
        elif isinstance(ni, list):  # tuple validation (draft 4 to 7)
            ol = oi if isinstance(oi, list) else []
            for i, item in enumerate(ni):
                self.compare(ol[i] if i < len(ol) else True, item, f"{path}/items/{i}", depth + 1)
        opi, npi = old.get("prefixItems"), new.get("prefixItems")
        if isinstance(npi, list):
            ol = opi if isinstance(opi, list) else []
            for i, item in enumerate(npi):
                self.compare(ol[i] if i < len(ol) else True, item, f"{path}/prefixItems/{i}", depth + 1)

    def _combined(self, old: dict, new: dict, path: str, depth: int) -> None:
        for kw in ("anyOf", "oneOf"):
            nb = new.get(kw)
            if not isinstance(nb, list):
                continue
            ob = old.get(kw)
            writer_branches = ob if isinstance(ob, list) else [{k: v for k, v in old.items() if k not in (kw,)}]
            for i, branch in enumerate(writer_branches):
                if not any(self._quiet(branch, cand, depth) for cand in nb):
                    self._bad("SUM_TYPE_NARROWED" if isinstance(ob, list) else "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
                              f"{path}/{kw}/{i}")
        nall = new.get("allOf")
        if isinstance(nall, list):
            oall = old.get("allOf") if isinstance(old.get("allOf"), list) else [old]
            for i, member in enumerate(nall):
                if not any(self._quiet(o, member, depth) for o in oall):
                    self._bad("PRODUCT_TYPE_EXTENDED", f"{path}/allOf/{i}")

    def _quiet(self, old: Any, new: Any, depth: int) -> bool:
        """Whether `new` reads `old` without errors (a trial comparison that records nothing)."""
        trial = _Diff(self.writer, self.reader)
        trial._seen = set(self._seen)
        trial.compare(old, new, "#", depth + 1)
        return not trial.errors


def _snake(keyword: str) -> str:
    out = "".join(f"_{c}" if c.isupper() else c for c in keyword)
    return out.upper()
