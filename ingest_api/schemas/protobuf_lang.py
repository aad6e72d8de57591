"""Protobuf schemas: `.proto` text parsed by `proto-schema-parser`, or a serialized FileDescriptorProto.

Confluent's registry takes a Protobuf schema as `.proto` text, or as a base64-encoded
`FileDescriptorProto` (what confluent-kafka's Python `ProtobufSerializer` sends). Text is parsed
by `proto_schema_parser` with a strict error listener (any syntax error refuses the schema); a
descriptor is decoded by `google.protobuf`. Both become one model: the package, and per message
(full name) its fields by number — name, label, kind (scalar, enum, message, map), type, oneof.
Every `import` must be a reference's name (or a `google/protobuf/` well-known file).

Reader rules (`read_errors`): Confluent's Protobuf `SchemaDiff` from the writer (original) to the
reader (update); these changes are compatible, every other is not: MESSAGE_ADDED, ENUM_ADDED,
ENUM_REMOVED, ENUM_CONST_ADDED / CHANGED / REMOVED, FIELD_ADDED, FIELD_REMOVED, FIELD_NAME_CHANGED,
FIELD_STRING_OR_BYTES_LABEL_CHANGED, ONEOF_ADDED, ONEOF_REMOVED, ONEOF_FIELD_ADDED,
ONEOF_FIELD_MOVED_TO_TOP_LEVEL. Scalar types are compatible within a wire kind: {int32, int64,
uint32, uint64, bool, enums}, {sint32, sint64}, {fixed32, sfixed32}, {fixed64, sfixed64},
{string, bytes}; float and double each alone.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass

from lakelog.ingest_api.schemas.errors import InvalidSchemaError
from lakelog.ingest_api.schemas.parsed import PROTOBUF, ParsedSchema, Reference

SCALAR_KINDS = {
    **dict.fromkeys(("int32", "int64", "uint32", "uint64", "bool"), "GENERAL_NUMBER"),
    **dict.fromkeys(("sint32", "sint64"), "SIGNED_NUMBER"),
    **dict.fromkeys(("fixed32", "sfixed32"), "FIXED32"),
    **dict.fromkeys(("fixed64", "sfixed64"), "FIXED64"),
    "float": "FLOAT", "double": "DOUBLE", "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
}
# FieldDescriptorProto.Type numbers -> scalar names (11 message, 14 enum, 10 group)
_DESCRIPTOR_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
                     8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
                     17: "sint32", 18: "sint64"}
MAX_MESSAGES = 10_000


@dataclass(frozen=True)
class Field:
    name: str
    label: str  # "", "optional", "repeated", "required"
    kind: str  # "scalar", "enum", "message", "map"
    type: str  # a scalar name, or a full name (".pkg.Msg"), or "map<k,v>"
    oneof: str | None


@dataclass
class Model:
    package: str
    messages: dict[str, dict[int, Field]]  # full name (".pkg.Outer.Inner") -> fields by number
    enums: dict[str, dict[str, int]]
    message_order: list[str]  # top-level then nested, in file order (Confluent's message indexes)


class ProtobufSchema(ParsedSchema):
    schema_type = PROTOBUF

    def __init__(self, canonical: str, model: Model, normalized_text: str,
                 references: Sequence[Reference] = ()) -> None:
        self.canonical = canonical
        self.model = model
        self.references = tuple(references)  # (name, type, text), dependencies first: for the descriptors
        self._normalized = normalized_text

    def normalized(self) -> str:
        return self._normalized

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"a {writer.schema_type} schema is not a Protobuf schema"]
        return _diff(writer.model, self.model)


# ------------------------------------------------------------------------------- parsing

def parse_protobuf(text: str, references: Sequence[Reference]) -> ProtobufSchema:
    names = {n for n, _, _ in references}
    ref_models = []
    for name, schema_type, ref_text in references:
        if schema_type != PROTOBUF:
            raise InvalidSchemaError(f"Invalid schema: reference {name!r} is {schema_type}, not PROTOBUF")
        ref_models.append(_model_of(ref_text, names, None)[0])
    model, normalized = _model_of(text, names, ref_models)
    return ProtobufSchema(text, model, normalized, references)


def _model_of(text: str, ref_names: set[str], ref_models: list[Model] | None) -> tuple[Model, str]:
    descriptor = _as_descriptor(text)
    if descriptor is not None:
        _check_imports(list(descriptor.dependency), ref_names)
        return _from_descriptor(descriptor, ref_models or []), descriptor.SerializeToString(deterministic=True).hex()
    ast = _parse_text(text)
    from proto_schema_parser import ast as pa
    imports = [e.name for e in ast.file_elements if isinstance(e, pa.Import)]
    _check_imports(imports, ref_names)
    from proto_schema_parser.generator import Generator
    return _from_ast(ast, ref_models or []), Generator().generate(ast)


def _check_imports(imports: list[str], ref_names: set[str]) -> None:
    for imp in imports:
        if imp not in ref_names and not imp.startswith("google/protobuf/") and not imp.startswith("confluent/"):
            raise InvalidSchemaError(f"Invalid schema: import {imp!r} is not one of the schema's references")


def _as_descriptor(text: str):
    stripped = text.strip()
    if any(c in stripped for c in " ;{\n"):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError
    fd = descriptor_pb2.FileDescriptorProto()
    try:
        fd.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InvalidSchemaError(f"Invalid schema: not a serialized FileDescriptorProto: {e}") from None
    if not fd.message_type and not fd.enum_type:
        raise InvalidSchemaError("Invalid schema: the FileDescriptorProto defines no message")
    return fd


class _Strict:
    """An ANTLR error listener that refuses the text at the first syntax error."""

    def syntaxError(self, recognizer, offendingSymbol, line, column, msg, e):  # noqa: N802 (ANTLR's name)
        raise InvalidSchemaError(f"Invalid schema: line {line}:{column}: {msg}")

    def reportAmbiguity(self, *args):  # noqa: N802
        pass

    def reportAttemptingFullContext(self, *args):  # noqa: N802
        pass

    def reportContextSensitivity(self, *args):  # noqa: N802
        pass


def _parse_text(text: str):
    from proto_schema_parser.parser import Parser

    def strict(x):
        x.removeErrorListeners()
        x.addErrorListener(_Strict())

    try:
        return Parser(setup_lexer=strict, setup_parser=strict).parse(text)
    except InvalidSchemaError:
        raise
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply") from None
    except Exception as e:  # the parser's own checks (duplicate names, ...) raise plain exceptions
        raise InvalidSchemaError(f"Invalid schema: {e}") from None


def _from_ast(ast, ref_models: list[Model]) -> Model:
    from proto_schema_parser import ast as pa
    package = next((e.name for e in ast.file_elements if isinstance(e, pa.Package)), "")
    prefix = f".{package}" if package else ""
    model = Model(package, {}, {}, [])
    pending: list[tuple[str, dict[int, tuple]]] = []

    def walk_enum(enum, full: str) -> None:
        model.enums[full] = {v.name: v.number for v in enum.elements if isinstance(v, pa.EnumValue)}

    def walk_message(msg, full: str) -> None:
        if len(model.messages) >= MAX_MESSAGES:
            raise InvalidSchemaError(f"Invalid schema: more than {MAX_MESSAGES} messages")
        model.message_order.append(full)
        raw: dict[int, tuple] = {}
        model.messages[full] = {}
        pending.append((full, raw))

        def field(f, oneof: str | None) -> None:
            if f.number in raw:
                raise InvalidSchemaError(f"Invalid schema: field number {f.number} is used twice in {full[1:]}")
            if isinstance(f, pa.MapField):
                raw[f.number] = (f.name, "", None, f"map<{f.key_type},{f.value_type}>", oneof)
            else:
                label = f.cardinality.value.lower() if f.cardinality is not None else ""
                raw[f.number] = (f.name, label, None, f.type, oneof)

        for el in msg.elements:
            if isinstance(el, (pa.Field, pa.MapField)):
                field(el, None)
            elif isinstance(el, pa.OneOf):
                for f in el.elements:
                    if isinstance(f, (pa.Field, pa.MapField)):
                        field(f, el.name)
            elif isinstance(el, pa.Message):
                walk_message(el, f"{full}.{el.name}")
            elif isinstance(el, pa.Enum):
                walk_enum(el, f"{full}.{el.name}")

    for el in ast.file_elements:
        if isinstance(el, pa.Message):
            walk_message(el, f"{prefix}.{el.name}")
        elif isinstance(el, pa.Enum):
            walk_enum(el, f"{prefix}.{el.name}")
    known_messages = set(model.messages).union(*(m.messages for m in ref_models))
    known_enums = set(model.enums).union(*(m.enums for m in ref_models))
    for full, raw in pending:
        for number, (name, label, _, typ, oneof) in raw.items():
            kind, resolved = _resolve_type(typ, full, known_messages, known_enums)
            model.messages[full][number] = Field(name, label, kind, resolved, oneof)
    return model


def _resolve_type(typ: str, scope: str, messages: set[str], enums: set[str]) -> tuple[str, str]:
    if typ.startswith("map<"):
        return "map", typ.replace(" ", "")
    if typ in SCALAR_KINDS:
        return "scalar", typ
    if typ.startswith("."):
        candidates = [typ]
    else:
        parts = scope.split(".")
        candidates = [".".join(parts[:i] + [typ]) for i in range(len(parts), 0, -1)]
        candidates = [c if c.startswith(".") else "." + c for c in candidates]
    for c in candidates:
        if c in enums:
            return "enum", c
        if c in messages:
            return "message", c
    return "message", typ if typ.startswith(".") else "." + typ  # an imported type we do not model


def _from_descriptor(fd, ref_models: list[Model]) -> Model:
    package = fd.package
    prefix = f".{package}" if package else ""
    model = Model(package, {}, {}, [])
    enum_names: set[str] = set().union(*(m.enums for m in ref_models))

    def collect_enums(msgs, scope: str) -> None:
        for m in msgs:
            for e in m.enum_type:
                enum_names.add(f"{scope}.{m.name}.{e.name}")
            collect_enums(m.nested_type, f"{scope}.{m.name}")

    for e in fd.enum_type:
        enum_names.add(f"{prefix}.{e.name}")
        model.enums[f"{prefix}.{e.name}"] = {v.name: v.number for v in e.value}
    collect_enums(fd.message_type, prefix)

    def walk(m, full: str) -> None:
        if m.options.map_entry:
            return
        if len(model.messages) >= MAX_MESSAGES:
            raise InvalidSchemaError(f"Invalid schema: more than {MAX_MESSAGES} messages")
        model.message_order.append(full)
        entries = {f"{full}.{n.name}": n for n in m.nested_type if n.options.map_entry}
        fields: dict[int, Field] = {}
        for f in m.field:
            oneof = None
            if f.HasField("oneof_index") and not f.proto3_optional:
                oneof = m.oneof_decl[f.oneof_index].name
            label = {1: "", 2: "required", 3: "repeated"}.get(f.label, "")
            if f.proto3_optional:
                label = "optional"
            if f.type in (11, 10) and f.type_name in entries:
                entry = entries[f.type_name]
                k, v = entry.field[0], entry.field[1]
                fields[f.number] = Field(f.name, "", "map", f"map<{_dtype(k)},{_dtype(v)}>", oneof)
            elif f.type in (11, 10):
                fields[f.number] = Field(f.name, label, "message", f.type_name, oneof)
            elif f.type == 14:
                fields[f.number] = Field(f.name, label, "enum", f.type_name, oneof)
            else:
                fields[f.number] = Field(f.name, label, "scalar", _DESCRIPTOR_TYPES.get(f.type, "int32"), oneof)
        model.messages[full] = fields
        for e in m.enum_type:
            model.enums[f"{full}.{e.name}"] = {v.name: v.number for v in e.value}
        for n in m.nested_type:
            walk(n, f"{full}.{n.name}")

    for m in fd.message_type:
        walk(m, f"{prefix}.{m.name}")
    return model


def _dtype(f) -> str:
    if f.type in (11, 14):
        return f.type_name.rsplit(".", 1)[-1]
    return _DESCRIPTOR_TYPES.get(f.type, "int32")


# ------------------------------------------------------------------------------- the diff

_COMPATIBLE = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED",
    "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED",
    "FIELD_STRING_OR_BYTES_LABEL_CHANGED", "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED",
    "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
})


def _scalar_kind(f: Field) -> str:
    return "GENERAL_NUMBER" if f.kind == "enum" else SCALAR_KINDS.get(f.type, f.type)


def _diff(old: Model, new: Model) -> list[str]:
    out: list[str] = []

    def bad(kind: str, where: str) -> None:
        if kind not in _COMPATIBLE:
            out.append(f"{kind} at {where}")

    if old.package != new.package:
        bad("PACKAGE_CHANGED", "#/")
    for name, ofields in old.messages.items():
        nfields = new.messages.get(name)
        where = name.lstrip(".")
        if nfields is None:
            bad("MESSAGE_REMOVED", f"#/{where}")
            continue
        moved_to_new_oneof: dict[str, int] = {}
        old_oneofs = {f.oneof for f in ofields.values() if f.oneof}
        for number, of in ofields.items():
            nf = nfields.get(number)
            fw = f"#/{where}/{number}"
            if nf is None:
                bad("REQUIRED_FIELD_REMOVED" if of.label == "required" else
                    ("ONEOF_FIELD_REMOVED" if of.oneof else "FIELD_REMOVED"), fw)
                continue
            if of.label != nf.label and "required" in (of.label, nf.label):
                bad("REQUIRED_FIELD_ADDED" if nf.label == "required" else "REQUIRED_FIELD_REMOVED", fw)
            if of.oneof is None and nf.oneof is not None:
                if nf.oneof in old_oneofs:
                    bad("FIELD_MOVED_TO_EXISTING_ONEOF", fw)
                else:
                    moved_to_new_oneof[nf.oneof] = moved_to_new_oneof.get(nf.oneof, 0) + 1
            _compare_field(of, nf, fw, bad)
        for oneof, count in moved_to_new_oneof.items():
            if count > 1:
                bad("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"#/{where}/{oneof}")
        for number, nf in nfields.items():
            if number not in ofields and nf.label == "required":
                bad("REQUIRED_FIELD_ADDED", f"#/{where}/{number}")
    return out


def _compare_field(of: Field, nf: Field, where: str, bad) -> None:
    okind = "scalar" if of.kind == "enum" else of.kind
    nkind = "scalar" if nf.kind == "enum" else nf.kind
    if okind != nkind:
        bad("FIELD_KIND_CHANGED", where)
        return
    if okind == "scalar":
        if _scalar_kind(of) != _scalar_kind(nf):
            bad("FIELD_SCALAR_KIND_CHANGED", where)
        elif (of.label == "repeated") != (nf.label == "repeated"):
            bad("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if _scalar_kind(of) == "STRING_OR_BYTES"
                else "FIELD_NUMERIC_LABEL_CHANGED", where)
        elif of.kind == "enum" and nf.kind == "enum" and of.type.rsplit(".", 1)[-1] != nf.type.rsplit(".", 1)[-1]:
            bad("FIELD_NAMED_TYPE_CHANGED", where)
    elif okind == "message":
        if of.type.rsplit(".", 1)[-1] != nf.type.rsplit(".", 1)[-1]:
            bad("FIELD_NAMED_TYPE_CHANGED", where)
        elif (of.label == "repeated") != (nf.label == "repeated"):
            bad("FIELD_KIND_CHANGED", where)
    elif okind == "map" and of.type != nf.type:
        bad("FIELD_KIND_CHANGED", where)
