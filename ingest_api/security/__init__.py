"""Client security of an ingest node, as services the core calls: who may connect (TLS, credentials,
API keys, the cluster secret that signs node-to-node calls), what they may do (ACLs, the authorizer),
how much (quotas), and the audit lines.

Pure parts, unit-tested without HTTP: `credentials` (salted, iterated password hashes as SCRAM-SHA-256
stores them; API key hashes), `acl` (the ACL model and the authorizer), `quotas` (token buckets),
`records` (the cluster metadata records of users, API keys and ACLs), `cluster_auth` (the signature of
node-to-node calls). `context.SecurityContext` ties them to a node; the HTTP door applies it
(`ingest_api/http/security_middleware.py`, `access.py`: which resource and operation each route
needs). Off by default.
"""
