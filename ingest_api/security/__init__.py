"""Client security of an ingest node: who may connect (TLS, credentials, API keys), what they may do
(ACLs, the authorizer), how much (quotas), and the HTTP middleware that applies all of it.

The pieces below the middleware are pure and unit-tested without HTTP: `credentials` (salted,
iterated password hashes as SCRAM-SHA-256 stores them; API key hashes), `acl` (the ACL model and
the authorizer), `quotas` (token buckets), `access` (which resource and operation each route
needs), `records` (the cluster metadata records of users, API keys and ACLs). Off by default.
"""
