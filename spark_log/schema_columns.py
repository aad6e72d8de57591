"""Typed columns from the raw `key` / `value` bytes, by the Schema Registry (a layer over any DataFrame of
the `lakelog` data source; the scan itself stays raw).

`decode_columns(df, registry_url, topic)` returns (rows, dead letters):

- **Which parts.** Values always; keys when the registry has the subject `<topic>-key`.
- **The reader schema** of a part is the latest version of `<topic>-key` / `<topic>-value` when the
  subject exists, else the highest schema id found in the part. Every record is read *as the
  reader*, so all of a part's records have one Spark type, the newest: Avro by schema resolution
  (`from_avro(payload, writer, {"avroSchema": reader})`: int → long, float → double, new fields
  with their defaults), JSON Schema by the reader's Spark type (`schema_types.json_schema_type`,
  `from_json`), Protobuf by the reader's message of the writer's message's full name (the wire
  format is the same across compatible versions). A table written before the subject evolved
  widens its column by Delta type widening (`tables.py`).
- **Decoding.** Avro and JSON natively (`from_avro`, `from_json` with a corrupt-record column);
  Protobuf in Python over Arrow batches (`mapInArrow`, google.protobuf; spark-protobuf is not on
  Maven Central for this Spark): the jobs ship the `protobuf` package to the executors in
  `lakelog_deps.zip` (`executor_deps`), so executors need only pyspark and pyarrow.
  The Confluent header (magic 0, schema id, Protobuf message indexes) is split by SQL
  expressions; Protobuf message indexes are read in Python.
- **Columns.** A value whose reader is a record (Avro record, JSON object with properties,
  Protobuf message) gives one column per field, next to the data source's columns; any other
  value gives `value_decoded`; a key gives `key_decoded`.
- **Dead letters.** A record whose key or value (when decoded) is not in the wire format, names
  an unknown schema or one of another type than the reader, or does not decode, goes to the dead
  letters with the reason (and the schema id of the part that failed), never stopping the sync.

Registry reads (`RegistryReader`, httpx on the driver): `GET /schemas/ids/{id}`, `GET
/subjects/{s}/versions/latest`, and for Protobuf `?format=serialized` descriptors of the schema
and its references. At most `MAX_SCHEMA_IDS` ids per part and call.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

MAX_SCHEMA_IDS = 1_000
MAX_REFERENCE_DEPTH = 32
REGISTRY_TIMEOUT_S = 30.0
AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
WIRE_REASON = "not in Confluent's wire format (magic byte 0, 4-byte schema id)"
REGISTRY_URL_KEY = "schema.registry.url"


@dataclass
class RegistryReader:
    """Reads of a Schema Registry at `url` (any Lakelog node), cached for one decode; `api_key` (Bearer)
    or `user` / `password` (Basic) when the cluster has authentication on."""

    url: str
    api_key: str | None = None
    user: str | None = None
    password: str | None = None
    _schemas: dict[int, dict | None] = field(default_factory=dict)
    _client: Any = None

    def _get(self, path: str, params: dict | None = None) -> Any:
        import httpx
        if self._client is None:
            kw: dict[str, Any] = {}
            if self.api_key:
                kw["headers"] = {"Authorization": f"Bearer {self.api_key}"}
            elif self.user is not None:
                kw["auth"] = httpx.BasicAuth(self.user, self.password or "")
            self._client = httpx.Client(base_url=self.url.rstrip("/"), timeout=REGISTRY_TIMEOUT_S, **kw)
        r = self._client.get(path, params=params)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def schema(self, schema_id: int) -> dict | None:
        """{"schemaType", "schema", "references"} of an id; None when the registry does not know it."""
        if schema_id not in self._schemas:
            doc = self._get(f"/schemas/ids/{schema_id}")
            if doc is not None:
                doc = {"schemaType": doc.get("schemaType", AVRO), "schema": doc["schema"],
                       "references": doc.get("references", [])}
            self._schemas[schema_id] = doc
        return self._schemas[schema_id]

    def latest_id(self, subject: str) -> int | None:
        from urllib.parse import quote
        doc = self._get(f"/subjects/{quote(subject, safe='')}/versions/latest")
        return None if doc is None else int(doc["id"])

    def subjects(self) -> set[str]:
        """The registry's subjects (those with a live version)."""
        return set(self._get("/subjects") or [])

    def subject_ids(self, subject: str) -> list[int]:
        """The schema ids of every version of `subject`, soft-deleted ones included (records written
        with them may still be in the log), in one `GET /schemas?subjectPrefix=`; caches their schemas."""
        docs = self._get("/schemas", {"subjectPrefix": subject, "deleted": "true"}) or []
        ids = set()
        for d in docs:
            if d.get("subject") != subject:
                continue
            ids.add(int(d["id"]))
            self._schemas.setdefault(int(d["id"]), {"schemaType": d.get("schemaType", AVRO), "schema": d["schema"],
                                                    "references": d.get("references", [])})
        return sorted(ids)

    def references(self, schema_id: int) -> dict[str, dict]:
        """The schemas a schema references, transitively: reference name -> {"schemaType", "schema",
        "references"} (of `GET /subjects/{subject}/versions/{version}`)."""
        from urllib.parse import quote
        out: dict[str, dict] = {}

        def add(doc: dict, depth: int) -> None:
            if depth > MAX_REFERENCE_DEPTH:
                raise ValueError("schema references nest too deeply")
            for ref in doc.get("references", []):
                if ref["name"] in out:
                    continue
                sub = self._get(f"/subjects/{quote(ref['subject'], safe='')}/versions/{int(ref['version'])}")
                if sub is None:
                    raise ValueError(f"reference {ref['name']} ({ref['subject']} v{ref['version']}) not found")
                sub = {"schemaType": sub.get("schemaType", AVRO), "schema": sub["schema"],
                       "references": sub.get("references", [])}
                out[ref["name"]] = sub
                add(sub, depth + 1)

        doc = self.schema(schema_id)
        if doc is not None:
            add(doc, 0)
        return out

    def avro_text(self, schema_id: int) -> str:
        """The schema text of an Avro id, self-contained: referenced named types inlined (`schema_refs`)."""
        from lakelog.spark_log.schema_refs import avro_full_name, inline_avro
        doc = self.schema(schema_id)
        if doc is None:
            raise ValueError(f"schema {schema_id} not found")
        if not doc.get("references"):
            return doc["schema"]
        named: dict[str, Any] = {}
        for name, ref in self.references(schema_id).items():
            parsed = json.loads(ref["schema"])
            if isinstance(parsed, dict):
                named[avro_full_name(parsed, None)[0]] = parsed
                named.setdefault(name, parsed)
        return json.dumps(inline_avro(json.loads(doc["schema"]), named))

    def json_refs(self, schema_id: int) -> dict[str, Any]:
        """The parsed documents a JSON Schema id references, by reference name."""
        return {name: json.loads(ref["schema"]) for name, ref in self.references(schema_id).items()}

    def descriptor_set(self, schema_id: int) -> bytes:
        """A serialized FileDescriptorSet of a Protobuf schema: well-known files, references, the schema last."""
        from urllib.parse import quote

        from google.protobuf import descriptor_pb2
        files: dict[str, Any] = {}
        order: list[str] = []

        def add(doc: dict, name: str | None, depth: int) -> None:
            if depth > MAX_REFERENCE_DEPTH:
                raise ValueError("Protobuf references nest too deeply")
            for ref in doc.get("references", []):
                if ref["name"] in files:
                    continue
                sub = self._get(f"/subjects/{quote(ref['subject'], safe='')}/versions/{int(ref['version'])}",
                                {"format": "serialized"})
                if sub is None:
                    raise ValueError(f"reference {ref['name']} ({ref['subject']} v{ref['version']}) not found")
                add(sub, ref["name"], depth + 1)
            fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(doc["schema"]))
            if name is not None:
                fd.name = name
            files[fd.name] = fd
            order.append(fd.name)

        main = self._get(f"/schemas/ids/{schema_id}", {"format": "serialized"})
        if main is None:
            raise ValueError(f"schema {schema_id} not found")
        add(main, None, 0)
        out = descriptor_pb2.FileDescriptorSet()
        for fd in _well_known():
            if fd.name not in files:
                out.file.append(fd)
        out.file.extend(files[n] for n in order)
        return out.SerializeToString()


def _well_known() -> list:
    import importlib

    from google.protobuf import descriptor_pb2
    out = []
    for name in ("any", "duration", "empty", "field_mask", "source_context", "struct", "timestamp", "type",
                 "wrappers", "api", "descriptor"):
        fd = descriptor_pb2.FileDescriptorProto()
        importlib.import_module(f"google.protobuf.{name}_pb2").DESCRIPTOR.CopyToProto(fd)
        out.append(fd)
    return out


def _pool(descriptor_set: bytes):
    from google.protobuf import descriptor_pb2, descriptor_pool
    pool = descriptor_pool.DescriptorPool()
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    for fd in fds.file:
        pool.Add(fd)
    return pool, fds.file[-1].name


def message_indexes(buf: bytes, pos: int = 5) -> tuple[tuple[int, ...], int]:
    """Confluent's Protobuf message indexes at `pos` (zig-zag varints: count, then indexes) and the payload start."""
    def varint(p: int) -> tuple[int, int]:
        z = shift = 0
        for _ in range(10):
            if p >= len(buf):
                raise ValueError("truncated message indexes")
            b = buf[p]
            p += 1
            z |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (z >> 1) ^ -(z & 1), p
        raise ValueError("message index varint too long")

    count, pos = varint(pos)
    if count == 0:
        return (0,), pos
    if not 0 < count <= 128:
        raise ValueError(f"message index count {count}")
    out = []
    for _ in range(count):
        i, pos = varint(pos)
        if i < 0:
            raise ValueError(f"message index {i}")
        out.append(i)
    return tuple(out), pos


def _message_by_indexes(pool, file_name: str, indexes: tuple[int, ...]):
    desc = None
    types = list(pool.FindFileByName(file_name).message_types_by_name.values())
    for i in indexes:
        if not 0 <= i < len(types):
            raise ValueError(f"message indexes {list(indexes)} name no message")
        desc = types[i]
        types = list(desc.nested_types)
    return desc


@dataclass(frozen=True)
class _PartPlan:
    part: str
    reader_id: int
    reader_type: str
    ids: dict[int, str]  # id -> why it cannot be read ("" when it can)


def read_decoded(spark, remote: str, topic: str, registry_url: str | None = None, **options: Any):
    """`spark.read.format("lakelog")` of `topic` with typed columns from the Schema Registry.

    Every row of the data source (options as the data source's: `partitions`, `startingOffset`, ...,
    `nodes`), and the typed columns of `decode_columns`; a row that does not decode keeps null typed
    columns and says why in `decode_error` (null for the rows that decode). `registry_url` defaults to
    the topic's `schema.registry.url` config (its descriptor in the remote tier)."""
    if registry_url is None:
        from lakelog.tiering.remote_scan import open_remote
        from lakelog.tiering.topics import read_topic_descriptor
        store = open_remote(remote)
        try:
            d = read_topic_descriptor(store, topic)
        finally:
            store.close()
        registry_url = (d.config(REGISTRY_URL_KEY) or "") if d is not None else ""
        if not registry_url:
            raise ValueError(f"topic {topic} has no {REGISTRY_URL_KEY} config: pass registry_url")
    reader = spark.read.format("lakelog").option("remote", remote).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return decode_columns(reader.load(), registry_url, topic, errors="column")


ERROR_MODES = ("split", "column", "drop", "fail")


def decode_columns(df, registry_url: "str | RegistryReader", topic: str, *, errors: str = "split",
                   parts: tuple[str, ...] | None = None, ids_from: str = "data",
                   subjects: dict[str, str] | None = None):
    """(rows with typed columns, dead letters (partition, offset, timestamp, key, value, schema_id, reason, date
    when df has it)) with `errors="split"`; with `errors="column"`, one DataFrame: every row, `decode_error`
    saying why a row did not decode (null when it did); `"drop"`: only the rows that decode; `"fail"`:
    every row, and the query fails on the first one that does not decode. See the module docstring.

    `parts`: which of "key" / "value" to decode (None: the value, and the key when its subject exists).
    `ids_from`: "data" collects the schema ids the rows carry (a Spark job, now); "registry" takes the
    ids of every version of the subjects (nothing read now: for DataFrames made ahead of their
    queries), and a record with another id gets its `decode_error`. `subjects`: part -> subject
    (default `<topic>-<part>`, Confluent's TopicNameStrategy)."""
    from pyspark.sql import functions as F

    if errors not in ERROR_MODES:
        raise ValueError(f"errors must be one of {ERROR_MODES}, not {errors!r}")
    own = not isinstance(registry_url, RegistryReader)
    reader = RegistryReader(registry_url) if own else registry_url
    subjects = {p: (subjects or {}).get(p) or f"{topic}-{p}" for p in ("key", "value")}
    try:
        if parts is None:
            parts = ("key", "value") if reader.latest_id(subjects["key"]) is not None else ("value",)
        parts = tuple(p for p in ("key", "value") if p in parts)
        base = list(df.columns)
        added: dict[str, tuple[str, bool]] = {}  # part -> (decoded column, is a record)
        for part in parts:
            df, decoded, is_record = _decode_part(df, reader, subjects[part], part, ids_from)
            added[part] = (decoded, is_record)
    finally:
        if own:
            reader.close()
    if not parts:
        return (df, None) if errors == "split" else df
    why = F.coalesce(*[F.col(f"_why_{p}") for p in parts])
    sid = F.coalesce(*[F.when(F.col(f"_why_{p}").isNotNull(), F.col(f"_sid_{p}")) for p in parts])
    dead_cols = [c for c in ("partition", "offset", "timestamp", "key", "value") if c in base]
    dead = df.where(why.isNotNull()).select(*dead_cols, sid.alias("schema_id"), why.alias("reason"),
                                            *(["date"] if "date" in base else []))
    if errors == "column":
        good = df.withColumn("decode_error", why)
        base = base + ["decode_error"]
    elif errors == "fail":
        where = [F.lit("partition "), F.col("partition").cast("string"), F.lit(" offset "),
                 F.col("offset").cast("string"), F.lit(": ")] if {"partition", "offset"} <= set(base) else []
        good = df.where(F.when(why.isNull(), F.lit(True))
                        .otherwise(F.raise_error(F.concat(F.lit(f"{topic}: "), *where, why))).cast("boolean"))
    else:
        good = df.where(why.isNull())
    out_cols = [F.col(c) for c in base]
    for part in parts:
        decoded, is_record = added[part]
        if decoded is None:
            continue
        if part == "value" and is_record:
            fields = [f.name for f in good.schema[decoded].dataType.fields]
            clash = set(fields) & set(base)
            if clash:
                raise ValueError(f"the value schema of {topic} has fields named like the table's columns: "
                                 f"{sorted(clash)}")
            out_cols += [F.when(F.col(f"_why_{part}").isNull(), F.col(f"{decoded}.`{n}`")).alias(n) for n in fields]
        else:
            out_cols.append(F.when(F.col(f"_why_{part}").isNull(), F.col(decoded)).alias(f"{part}_decoded"))
    if errors != "split":
        return good.select(*out_cols)
    return good.select(*out_cols), dead


def _decode_part(df, reader: RegistryReader, subject: str, part: str, ids_from: str = "data"):
    """df with `_sid_<part>`, `_why_<part>` (reason or null) and the decoded column; (df, column, is_record)."""
    from pyspark.sql import functions as F

    col = F.col(part)
    framed = col.isNotNull() & (F.length(col) >= 5) & (F.hex(F.substring(col, 1, 1)) == "00")
    sid_name, why_name, dec_name = f"_sid_{part}", f"_why_{part}", f"_dec_{part}"
    df = df.withColumn(sid_name, F.when(framed, F.conv(F.hex(F.substring(col, 2, 4)), 16, 10).cast("long")))
    if ids_from == "registry":
        ids = reader.subject_ids(subject)
        if len(ids) > MAX_SCHEMA_IDS:
            raise ValueError(f"more than {MAX_SCHEMA_IDS} schema ids in subject {subject}")
    else:
        ids = sorted(int(r[0]) for r in df.where(framed).select(sid_name).distinct().limit(MAX_SCHEMA_IDS + 1).collect())
        if len(ids) > MAX_SCHEMA_IDS:
            raise ValueError(f"more than {MAX_SCHEMA_IDS} schema ids in the {part}s of one sync")
    sid = F.col(sid_name)
    reader_id = reader.latest_id(subject)
    known = [i for i in ids if reader.schema(i) is not None]
    if reader_id is None and known:
        reader_id = max(known)
    reader_doc = reader.schema(reader_id) if reader_id is not None else None
    why = F.when(col.isNotNull() & ~framed, F.lit(f"the {part} is {WIRE_REASON}"))
    for i in ids:
        doc = reader.schema(i)
        if doc is None or reader_doc is None:
            why = why.when(sid == i, F.lit(f"{part} schema id {i} is unknown to the registry"))
        elif doc["schemaType"] != reader_doc["schemaType"]:
            why = why.when(sid == i, F.lit(f"{part} schema id {i} is {doc['schemaType']}, the reader schema "
                                           f"{reader_id} is {reader_doc['schemaType']}"))
    # an id not listed (ids from the registry: a record of another subject, or of a version made after
    # this DataFrame) has no decoder here: said so, never a silent null
    unlisted = ~sid.isin(*ids) if ids else F.lit(True)
    why = why.when(framed & unlisted, F.concat(F.lit(f"{part} schema id "), sid.cast("string"),
                                               F.lit(f" is not a version of subject {subject} known to this read")))
    readable = [i for i in ids if reader.schema(i) is not None and reader_doc is not None
                and reader.schema(i)["schemaType"] == reader_doc["schemaType"]]
    if reader_doc is None or not readable:
        return df.withColumn(why_name, why), None, False
    kind = reader_doc["schemaType"]
    if kind == AVRO:
        df, decoded, bad, is_record = _avro(df, part, reader, reader_id, readable)
    elif kind == JSON:
        df, decoded, bad, is_record = _json(df, part, reader, reader_id)
    else:
        df, decoded, bad, is_record = _protobuf(df, part, reader, reader_id, readable)
    why = why.when(framed & sid.isin(readable) & bad,
                   F.concat(F.lit(f"the {part} does not decode with {kind} schema id "), sid.cast("string"),
                            F.lit(f" (read as schema id {reader_id})")))
    df = df.withColumn(dec_name, F.when(framed & sid.isin(readable), decoded)).withColumn(why_name, why)
    return df, dec_name, is_record


def _avro(df, part: str, reader: RegistryReader, reader_id: int, ids: list[int]):
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    payload = F.expr(f"substring(`{part}`, 6)")
    sid = F.col(f"_sid_{part}")
    decoded = None
    reader_text = reader.avro_text(reader_id)  # references inlined: from_avro takes one schema text
    for i in ids:
        text = reader.avro_text(i)
        options = {"mode": "PERMISSIVE"}
        if text != reader_text:
            options["avroSchema"] = reader_text  # read as the reader: Avro schema resolution
        branch = from_avro(payload, text, options)
        decoded = F.when(sid == i, branch) if decoded is None else decoded.when(sid == i, branch)
    try:
        doc = json.loads(reader_text)
    except ValueError:
        doc = None
    tmp = f"_avro_{part}"
    df = df.withColumn(tmp, decoded)
    bad = F.col(tmp).isNull()
    is_record = isinstance(doc, dict) and doc.get("type") == "record"
    if is_record:
        # PERMISSIVE gives a record of nulls for bytes that do not decode: a null in a field whose type
        # cannot be null marks them (a record whose fields are all nullable cannot be told apart)
        for f in doc.get("fields", []):
            t = f.get("type")
            if not (t == "null" or (isinstance(t, list) and "null" in t)):
                bad = bad | F.col(f"{tmp}.`{f['name']}`").isNull()
    return df, F.col(tmp), bad, is_record


def _json(df, part: str, reader: RegistryReader, reader_id: int):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from lakelog.spark_log.schema_types import json_schema_type

    try:
        doc = json.loads(reader.schema(reader_id)["schema"])
    except ValueError:
        doc = {}
    target = json_schema_type(doc, reader.json_refs(reader_id))
    wrapped = StructType([StructField("v", target), StructField("_corrupt_record", StringType())])
    text = F.concat(F.lit('{"v":'), F.expr(f"cast(substring(`{part}`, 6) as string)"), F.lit("}"))
    tmp = f"_json_{part}"
    df = df.withColumn(tmp, F.from_json(text, wrapped, {"mode": "PERMISSIVE",
                                                        "columnNameOfCorruptRecord": "_corrupt_record"}))
    bad = F.col(tmp).isNull() | F.col(f"{tmp}._corrupt_record").isNotNull() | F.col(f"{tmp}.v").isNull()
    return df, F.col(f"{tmp}.v"), bad, isinstance(target, StructType)


def _protobuf(df, part: str, reader: RegistryReader, reader_id: int, ids: list[int]):
    """Protobuf payloads decoded in Python over Arrow batches, as the reader's message of the writer's name."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from lakelog.spark_log.schema_types import protobuf_type

    sets = {i: reader.descriptor_set(i) for i in set(ids) | {reader_id}}
    pool, main = _pool(sets[reader_id])
    first = _message_by_indexes(pool, main, (0,))
    target = protobuf_type(first)
    tmp, tmp_bad = f"_pb_{part}", f"_pb_{part}_bad"
    out_schema = StructType(list(df.schema.fields) + [StructField(tmp, target), StructField(tmp_bad, StringType())])
    fn = _ProtobufBatches(part, sets, reader_id, target.json(), first.full_name)
    df = df.mapInArrow(fn, out_schema)
    return df, F.col(tmp), F.col(tmp_bad).isNotNull(), True


class _ProtobufBatches:
    """The mapInArrow function: appends the decoded message and a failure flag to each batch (picklable)."""

    def __init__(self, part: str, sets: dict[int, bytes], reader_id: int, target_json: str,
                 target_name: str) -> None:
        self.part, self.sets, self.reader_id, self.target_json = part, sets, reader_id, target_json
        self.target_name = target_name  # the reader's first message: the column's type

    def __call__(self, batches):
        from lakelog.spark_log.executor_deps import load_shipped_deps

        load_shipped_deps()  # protobuf, on a cluster whose executors have only pyspark and pyarrow
        import pyarrow as pa
        from google.protobuf import message_factory
        from pyspark.sql.pandas.types import to_arrow_type
        from pyspark.sql.types import _parse_datatype_json_string

        from lakelog.spark_log.schema_types import protobuf_value

        spark_type = _parse_datatype_json_string(self.target_json)
        arrow_types: dict[bool, Any] = {}
        pools = {i: _pool(s) for i, s in self.sets.items()}
        reader_pool, reader_main = pools[self.reader_id]
        classes: dict[tuple[int, tuple[int, ...]], Any] = {}

        def message_class(sid: int, indexes: tuple[int, ...]):
            key = (sid, indexes)
            cls = classes.get(key)
            if cls is None:
                pool, main = pools[sid]
                writer = _message_by_indexes(pool, main, indexes)
                try:
                    desc = reader_pool.FindMessageTypeByName(writer.full_name)
                except KeyError:
                    desc = writer
                cls = classes[key] = message_factory.GetMessageClass(desc)
            return cls

        for batch in batches:
            large = pa.types.is_large_binary(batch.column(self.part).type)  # Spark's useLargeVarTypes
            if large not in arrow_types:
                arrow_types[large] = to_arrow_type(spark_type, timezone="UTC", prefers_large_types=large)
            arrow_type = arrow_types[large]
            values, bad = [], []
            for data in batch.column(self.part).to_pylist():
                if data is None or len(data) < 5 or data[0] != 0:
                    values.append(None)
                    bad.append(None)
                    continue
                sid = int.from_bytes(data[1:5], "big")
                try:
                    if sid not in pools:
                        raise ValueError("not a readable schema")
                    indexes, start = message_indexes(data)
                    cls = message_class(sid, indexes)
                    if cls.DESCRIPTOR.full_name != self.target_name:
                        raise ValueError(f"message {cls.DESCRIPTOR.full_name} is not the table's {self.target_name}")
                    msg = cls.FromString(data[start:])
                    values.append(protobuf_value(msg))
                    bad.append(None)
                except Exception as e:  # noqa: BLE001 - any failure of one record is its dead letter
                    values.append(None)
                    bad.append(f"{type(e).__name__}: {e}"[:200])
            try:
                column = pa.array(values, type=arrow_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                for n, v in enumerate(values):  # find the rows Arrow refuses; they become dead letters
                    try:
                        pa.array([v], type=arrow_type)
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                        values[n], bad[n] = None, f"not of the table's type: {e}"[:200]
                column = pa.array(values, type=arrow_type)
            yield pa.RecordBatch.from_arrays(
                list(batch.columns) + [column,
                                       pa.array(bad, type=pa.large_string() if large else pa.string())],
                names=list(batch.schema.names) + [f"_pb_{self.part}", f"_pb_{self.part}_bad"])
