"""The remote tier: sealed segments on object storage, remote log metadata, transparent reads.

Modules: `store` (the object-store seam), `stores` (`open_store`), `s3_store` / `fs_store` (the two stores),
`layout` (object keys), `manifest_codec` (the manifest format), `manifest_model` (its entries and the
segment state machine), `manifest_transitions`,
`metadata` (compare-and-swap commits with leader-epoch fencing), `epochs` (the `.epochs` format),
`uploader` (copy rounds, retention, cleanup), `reader` (remote fetches and timestamp lookups),
`cache` (byte-bounded LRU), `metrics`, `config`, `errors`, and `manager` (what the node calls).
See docs/tiering.md.
"""
