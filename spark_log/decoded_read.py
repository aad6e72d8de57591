"""Typed columns as options of the `lakelog` data source, whichever reader serves it:

    spark.read.format("lakelog").option("remote", URL).option("topic", "orders") \\
        .option("valueFormat", "schema-registry").load()

The options (Spark's option keys are case-insensitive):

- `valueFormat`: `raw` (the default: `value` stays bytes) or `schema-registry` (values in Confluent's
  wire format decoded by the Schema Registry: Avro, JSON Schema, Protobuf, references included).
- `keyFormat`: `raw` or `schema-registry`; when left out and `valueFormat` is `schema-registry`, keys
  are decoded when the registry has the key subject (as `sync-tables` does).
- `schema.registry.url`: the registry (any Lakelog node serves it); default: the topic's
  `schema.registry.url` config (its descriptor in the remote tier), else the `nodes` option.
- `valueSubject` / `keySubject`: the subjects read (default `<topic>-value` / `<topic>-key`,
  Confluent's TopicNameStrategy). Records are read as the subject's latest version when the
  DataFrame is made; records written with any version of the subject decode (ids of other
  subjects, or of versions registered later, get a `decode_error`).
- `mode` (as `from_avro` / `from_json`): `PERMISSIVE` (the default: every row, `decode_error` says
  why a row did not decode, null when it did), `DROPMALFORMED` (only the rows that decode, no
  `decode_error` column), `FAILFAST` (the query fails on the first row that does not decode).

The columns are `sync-tables`' (`schema_columns.decode_columns`): the data source's, then one
column per field of a record value (Avro record, JSON object, Protobuf message), or
`value_decoded` for any other value, and `key_decoded`. Nothing is read when the DataFrame is
made but the registry (a few GETs); the subject's schemas are fixed then.

How: `install()` wraps PySpark's (classic) `DataFrameReader`. It keeps each reader's format and
options in Python as well; at `load()` of the `lakelog` (or `lakelog_python`) format with one of
these options, it loads the data source without them (through the JVM reader or the Python one,
whichever serves the format) and applies the decoding to the scan's DataFrame. Any other read
passes through unchanged. `datasource.register(spark)` and the session factory call `install()`;
a Spark Connect client's reader is not wrapped (`lakelog sql` views are typed on the server).
"""

from __future__ import annotations

from typing import Any

VALUE_FORMAT, KEY_FORMAT, MODE = "valueformat", "keyformat", "mode"
REGISTRY_URL, VALUE_SUBJECT, KEY_SUBJECT = "schema.registry.url", "valuesubject", "keysubject"
DECODE_KEYS = frozenset({VALUE_FORMAT, KEY_FORMAT, MODE, REGISTRY_URL, VALUE_SUBJECT, KEY_SUBJECT})
RAW, SCHEMA_REGISTRY = "raw", "schema-registry"
FORMATS = (RAW, SCHEMA_REGISTRY)
MODES = {"PERMISSIVE": "column", "DROPMALFORMED": "drop", "FAILFAST": "fail"}
SOURCE_NAMES = frozenset({"lakelog", "lakelog_python"})
_STATE = "_lakelog_reader_state"
REGISTRY_URL_KEY = "schema.registry.url"  # the topic config


class DecodeOptionError(ValueError):
    """A decoding option of the lakelog data source is invalid, or cannot be applied."""


def wants_decoding(options: dict[str, Any]) -> bool:
    """Whether `options` (keys lowercased) name a key or value format (checked by `decode`)."""
    return options.get(VALUE_FORMAT) is not None or options.get(KEY_FORMAT) is not None


def topic_registry_url(remote: str | None, topic: str) -> str | None:
    """The topic's `schema.registry.url` config, from its descriptor in the remote tier (None: none)."""
    if not remote:
        return None
    from lakelog.tiering.remote_scan import open_remote
    from lakelog.tiering.topics import read_topic_descriptor

    store = open_remote(remote)
    try:
        d = read_topic_descriptor(store, topic)
    finally:
        store.close()
    return (d.config(REGISTRY_URL_KEY) or None) if d is not None else None



def decode(df, options: dict[str, Any]):
    """The scan `df` of the lakelog source read with `options` (keys lowercased) with its typed columns."""
    import os

    from lakelog.spark_log.schema_columns import RegistryReader, decode_columns

    value_format = str(options.get(VALUE_FORMAT, RAW)).lower()
    key_format = options.get(KEY_FORMAT)
    for name, given in ((VALUE_FORMAT, value_format), (KEY_FORMAT, key_format)):
        if given is not None and str(given).lower() not in FORMATS:
            raise DecodeOptionError(f"option {name} must be one of {', '.join(FORMATS)}, not {given!r}")
    mode = str(options.get(MODE, "PERMISSIVE")).upper()
    if mode not in MODES:
        raise DecodeOptionError(f"option mode must be one of {', '.join(MODES)}, not {options.get(MODE)!r}")
    topic = options.get("topic")
    if not topic:
        raise DecodeOptionError("the lakelog data source needs option('topic', NAME)")
    remote = options.get("remote") or os.environ.get("LAKELOG_REMOTE")
    url = options.get(REGISTRY_URL) or topic_registry_url(remote, topic)
    if not url and options.get("nodes"):
        url = str(options["nodes"]).split(",")[0].strip()
    if not url:
        raise DecodeOptionError(f"a decoded read of {topic} needs option('schema.registry.url', URL): the topic has "
                                f"no {REGISTRY_URL_KEY} config and no `nodes` option was given")
    subjects = {"value": options.get(VALUE_SUBJECT) or f"{topic}-value",
                "key": options.get(KEY_SUBJECT) or f"{topic}-key"}
    reader = RegistryReader(url, options.get("apikey") or os.environ.get("LAKELOG_API_KEY") or None,
                            options.get("user") or os.environ.get("LAKELOG_USER") or None,
                            options.get("password") or os.environ.get("LAKELOG_PASSWORD") or None)
    try:
        parts = []
        if key_format is None and value_format == SCHEMA_REGISTRY:
            if reader.latest_id(subjects["key"]) is not None:
                parts.append("key")
        elif str(key_format).lower() == SCHEMA_REGISTRY:
            parts.append("key")
        if value_format == SCHEMA_REGISTRY:
            parts.append("value")
        if not parts:
            return df
        for part in parts:
            if reader.latest_id(subjects[part]) is None:
                raise DecodeOptionError(f"{part}s of {topic} cannot be decoded: the registry at {url} has no subject "
                                        f"{subjects[part]}")
        return decode_columns(df, reader, topic, errors=MODES[mode], parts=tuple(parts), ids_from="registry",
                              subjects=subjects)
    finally:
        reader.close()


def install() -> None:
    """Wrap PySpark's classic DataFrameReader (once per process) so that the decoding options work
    on `spark.read.format("lakelog")`; see the module docstring."""
    from pyspark.sql.readwriter import DataFrameReader

    if getattr(DataFrameReader, "_lakelog_decoding", False):
        return
    orig_format, orig_schema = DataFrameReader.format, DataFrameReader.schema
    orig_option, orig_options, orig_load = DataFrameReader.option, DataFrameReader.options, DataFrameReader.load

    def state(self) -> dict:
        st = self.__dict__.get(_STATE)
        if st is None:
            st = self.__dict__[_STATE] = {"format": None, "schema": None, "options": {}}
        return st

    def format(self, source):
        state(self)["format"] = source
        return orig_format(self, source)

    def schema(self, schema):
        state(self)["schema"] = schema
        return orig_schema(self, schema)

    def option(self, key, value):
        state(self)["options"][str(key)] = value
        return orig_option(self, key, value)

    def options(self, **options):
        state(self)["options"].update({str(k): v for k, v in options.items()})
        return orig_options(self, **options)

    def load(self, path=None, format=None, schema=None, **options):
        if format is not None:
            self.format(format)
        if schema is not None:
            self.schema(schema)
        self.options(**options)
        st = state(self)
        lowered = {k.lower(): v for k, v in st["options"].items() if v is not None}
        fmt = str(st["format"] or "").lower()
        if fmt not in SOURCE_NAMES or not wants_decoding(lowered):
            return orig_load(self, path)
        raw = DataFrameReader(self._spark)  # the same read without the decoding options
        orig_format(raw, st["format"])
        if st["schema"] is not None:
            orig_schema(raw, st["schema"])
        for k, v in st["options"].items():
            if k.lower() not in DECODE_KEYS:
                orig_option(raw, k, v)
        return decode(orig_load(raw, path), lowered)

    DataFrameReader.format, DataFrameReader.schema = format, schema
    DataFrameReader.option, DataFrameReader.options, DataFrameReader.load = option, options, load
    DataFrameReader._lakelog_decoding = True


class ViewTyping:
    """Types the `lakelog.<topic>` views as `sync-tables` types the tables: a topic whose registry
    has `<topic>-value` (or `<topic>-key`) gets the decoded columns and `decode_error` (PERMISSIVE).
    The registry is the nodes' (every node serves it) when the views read the nodes, else the
    topic's `schema.registry.url` config. A registry that cannot be read, or a schema the view
    cannot be typed by (a field named like a data source column), leaves that view raw, with a
    warning in the log; the SQL server's refresh tries again."""

    def __init__(self, remote: str, nodes: str | None = None, node_options: dict[str, str] | None = None) -> None:
        self.remote, self.nodes = remote, nodes
        self.node_options = {k.lower(): v for k, v in (node_options or {}).items()}
        self._subjects: dict[str, set[str] | None] = {}

    def _registry_subjects(self, url: str) -> set[str] | None:
        if url not in self._subjects:
            import logging

            from lakelog.spark_log.schema_columns import RegistryReader

            import os

            o = self.node_options  # credentials as the hot tail takes them: options, else the environment
            reader = RegistryReader(url, o.get("apikey") or os.environ.get("LAKELOG_API_KEY") or None,
                                    o.get("user") or os.environ.get("LAKELOG_USER") or None,
                                    o.get("password") or os.environ.get("LAKELOG_PASSWORD") or None)
            try:
                self._subjects[url] = reader.subjects()
            except Exception as e:  # noqa: BLE001 - the views stay raw; the next refresh retries
                logging.getLogger(__name__).warning("the Schema Registry at %s cannot be read (%s): views untyped",
                                                    url, e)
                self._subjects[url] = None
            finally:
                reader.close()
        return self._subjects[url]

    def apply(self, df, topic: str):
        """`df` (the view's raw DataFrame) typed when the topic has registry subjects, else `df`."""
        import logging

        url = self.nodes.split(",")[0].strip() if self.nodes else None
        if not url:
            try:
                url = topic_registry_url(self.remote, topic)
            except Exception:  # noqa: BLE001 - no descriptor readable: raw view
                url = None
        subjects = self._registry_subjects(url) if url else None
        if not subjects or not {f"{topic}-value", f"{topic}-key"} & subjects:
            return df
        options = {**self.node_options, "topic": topic, REGISTRY_URL: url,
                   VALUE_FORMAT: SCHEMA_REGISTRY if f"{topic}-value" in subjects else RAW,
                   KEY_FORMAT: SCHEMA_REGISTRY if f"{topic}-key" in subjects else RAW}
        try:
            return decode(df, options)
        except Exception as e:  # noqa: BLE001 - one topic's schema never hides the other views
            logging.getLogger(__name__).warning("lakelog.%s is not typed: %s", topic, e)
            return df
