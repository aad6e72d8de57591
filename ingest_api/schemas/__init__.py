"""The Schema Registry: Confluent's API, schemas stored in the cluster metadata log.

Pure parts (no HTTP, no node): `languages` (Avro, JSON Schema, Protobuf: parse, normalize, the
reader/writer rules of each language), `compatibility` (the seven levels), `state` (the replicated
registry state, its metadata records and the controller's validation), `wire` (Confluent's wire
format). `service` ties them to a node; `rest` / `rest_v3` convert records with schemas for produce
and fetch; the HTTP routes are `ingest_api/http/routers/schemas.py`.
"""
