"""Protobuf values: a schema's descriptors, and its messages to and from JSON (pure but for protoc).

A Protobuf schema is stored as `.proto` text or as a base64 `FileDescriptorProto`
(`protobuf_lang.py`). To convert values, the registry needs descriptors: `descriptor_set(parsed)`
is the schema's `FileDescriptorSet` — its references' files first (dependencies before dependents,
Google's well-known files included), the schema's own file last:

    text schema         compiled by protoc (grpcio-tools' `grpc_tools.protoc`, run as a child
                        process with a time bound, `PROTOC_TIMEOUT_S`): the schema is written as
                        `MAIN_FILE`, each text reference under its reference name (its import
                        path), descriptor references passed with `--descriptor_set_in`.
    descriptor schema   taken as it is; text references are compiled as above.

It is computed once per parsed schema (cached on the object; parsed schemas are cached by the
registry state). protoc's message for a schema it refuses (an undefined type, ...) is raised as
`InvalidSchemaError`.

Values (Confluent REST Proxy's rules, `ProtobufSchemaUtils`): a produce converts the JSON value
with Protobuf's JSON mapping (`json_format.ParseDict`; an unknown field is an error) into the
schema's first message (message indexes [0], as Confluent's REST Proxy writes); a fetch renders
the message its wire-format message indexes name with the JSON mapping, default values included
(`JsonFormat.printer().includingDefaultValueFields()`).
"""

from __future__ import annotations

import base64
import os
import posixpath
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from lakelog.ingest_api.schemas.errors import InvalidSchemaError
from lakelog.ingest_api.schemas.parsed import PROTOBUF, ParsedSchema

MAIN_FILE = "lakelog_schema.proto"  # the file name a text schema gets in its descriptor set
PROTOC_TIMEOUT_S = 30.0
MAX_PROTOC_OUTPUT_BYTES = 64 * 1024  # of protoc's error text kept in the message
_WELL_KNOWN = ("any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp", "type",
               "wrappers", "descriptor")
_lock = threading.Lock()


def descriptor_set(parsed: ParsedSchema):
    """The schema's FileDescriptorSet (dependencies first, the schema's file last); cached on `parsed`."""
    cached = getattr(parsed, "_descriptor_set", None)
    if cached is not None:
        return cached
    with _lock:
        cached = getattr(parsed, "_descriptor_set", None)
        if cached is None:
            cached = _build(parsed)
            object.__setattr__(parsed, "_descriptor_set", cached)
    return cached


def serialized(parsed: ParsedSchema) -> str:
    """The schema's own FileDescriptorProto, base64 (the registry's `?format=serialized`)."""
    fds = descriptor_set(parsed)
    return base64.b64encode(fds.file[-1].SerializeToString(deterministic=True)).decode()


def message_class(parsed: ParsedSchema, indexes: Sequence[int] = (0,)):
    """The generated class of the message `indexes` names (Confluent's message indexes)."""
    classes = getattr(parsed, "_message_classes", None)
    if classes is None:
        classes = {}
        object.__setattr__(parsed, "_message_classes", classes)
    key = tuple(indexes)
    cls = classes.get(key)
    if cls is None:
        from google.protobuf import descriptor_pool, message_factory
        pool = getattr(parsed, "_pool", None)
        if pool is None:
            pool = descriptor_pool.DescriptorPool()
            for f in descriptor_set(parsed).file:
                pool.Add(f)
            object.__setattr__(parsed, "_pool", pool)
        main = pool.FindFileByName(descriptor_set(parsed).file[-1].name)
        desc = None
        types = list(main.message_types_by_name.values())
        for depth, i in enumerate(key):
            if not 0 <= i < len(types):
                raise IndexError(f"message index {i} at depth {depth} names no message")
            desc = types[i]
            types = list(desc.nested_types)
        if desc is None:
            raise IndexError("no message indexes")
        cls = message_factory.GetMessageClass(desc)
        classes[key] = cls
    return cls


def to_bytes(parsed: ParsedSchema, value: Any) -> bytes:
    """The Protobuf binary of a JSON value in the schema's first message; ValueError when it does not fit."""
    from google.protobuf import json_format
    msg = message_class(parsed, (0,))()
    try:
        json_format.ParseDict(value, msg)
    except json_format.ParseError as e:
        raise ValueError(str(e)) from None
    return msg.SerializeToString(deterministic=True)


def to_json(parsed: ParsedSchema, payload: bytes, indexes: Sequence[int]) -> Any:
    """The JSON of a Protobuf binary payload, read as the message `indexes` names; ValueError when it does not decode."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    try:
        cls = message_class(parsed, indexes)
    except IndexError as e:
        raise ValueError(str(e)) from None
    msg = cls()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, RuntimeError) as e:
        raise ValueError(f"not a {cls.DESCRIPTOR.full_name}: {e}") from None
    return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)


# ------------------------------------------------------------------------------- building

def _build(parsed: ParsedSchema):
    from google.protobuf import descriptor_pb2
    if parsed.schema_type != PROTOBUF:
        raise InvalidSchemaError(f"a {parsed.schema_type} schema has no Protobuf descriptors")
    references = list(getattr(parsed, "references", ()))
    texts: dict[str, str] = {}
    binaries: dict[str, Any] = {}
    for name, _, text in references:
        _check_path(name)
        fd = _as_descriptor(text)
        if fd is None:
            texts[name] = text
        else:
            fd.name = name  # imports name it so
            binaries[name] = fd
    own = _as_descriptor(parsed.canonical)
    compiled: dict[str, Any] = {}
    if texts or own is None:
        targets = list(texts) + ([MAIN_FILE] if own is None else [])
        files = dict(texts)
        if own is None:
            files[MAIN_FILE] = parsed.canonical
        for fd in _protoc(files, targets, list(binaries.values())).file:
            compiled[fd.name] = fd
    by_name = {**_well_known(), **binaries, **compiled}
    main = own if own is not None else by_name.pop(MAIN_FILE)
    out = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def visit(fd, depth: int) -> None:
        if depth > 64:
            raise InvalidSchemaError("Invalid schema: imports nest deeper than 64")
        for dep in fd.dependency:
            if dep in seen:
                continue
            d = by_name.get(dep)
            if d is None:
                raise InvalidSchemaError(f"Invalid schema: import {dep!r} is not one of the schema's references")
            seen.add(dep)
            visit(d, depth + 1)
            out.file.append(d)

    visit(main, 0)
    out.file.append(main)
    return out


def _as_descriptor(text: str):
    from lakelog.ingest_api.schemas.protobuf_lang import _as_descriptor as parse
    fd = parse(text)
    if fd is not None and not fd.name:
        fd.name = MAIN_FILE
    return fd


def _check_path(name: str) -> None:
    norm = posixpath.normpath(name)
    if not name or name.startswith("/") or norm != name or norm.startswith("..") or "\\" in name:
        raise InvalidSchemaError(f"Invalid schema: reference name {name!r} is not a relative import path")


def _well_known() -> dict[str, Any]:
    import importlib

    from google.protobuf import descriptor_pb2
    out = {}
    for name in _WELL_KNOWN:
        module = importlib.import_module(f"google.protobuf.{name}_pb2")
        fd = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fd)
        out[fd.name] = fd
    return out


def _protoc(files: dict[str, str], targets: list[str], binaries: list[Any]):
    """Compile `targets` among `files` (path -> text) with protoc; the FileDescriptorSet with imports."""
    import grpc_tools
    from google.protobuf import descriptor_pb2
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="lakelog-protoc-") as tmp:
        src = os.path.join(tmp, "src")
        for path, text in files.items():
            full = os.path.join(src, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "out.pb")
        args = [sys.executable, "-m", "grpc_tools.protoc", "--proto_path=.", f"--proto_path={include}",
                "--include_imports", f"--descriptor_set_out={out}"]
        if binaries:
            given = descriptor_pb2.FileDescriptorSet(file=binaries)
            given_path = os.path.join(tmp, "given.pb")
            with open(given_path, "wb") as f:
                f.write(given.SerializeToString())
            args.append(f"--descriptor_set_in={given_path}")
        try:
            done = subprocess.run(args + targets, cwd=src, capture_output=True, timeout=PROTOC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InvalidSchemaError(f"Invalid schema: protoc did not finish within {PROTOC_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            why = done.stderr[:MAX_PROTOC_OUTPUT_BYTES].decode("utf-8", "replace").strip()
            raise InvalidSchemaError(f"Invalid schema: {why.replace(MAIN_FILE + ':', 'line ')}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
        return fds
