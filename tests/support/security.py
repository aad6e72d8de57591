"""Seeding a secured node over its v3 API as the cluster's own principal: users, topics, ACLs."""

from __future__ import annotations

from typing import Iterable

import httpx

from lakelog.ingest_api.security.cluster_auth import ClusterAuth


def seed_secured_node(url: str, secret: str, users: dict[str, str], topics: Iterable[str],
                      acls: Iterable[dict[str, str]]) -> str:
    """Create `users` (name -> password), one-partition `topics` and `acls`; returns the cluster id."""
    with httpx.Client(base_url=url, auth=ClusterAuth(secret.encode(), 0, principal="User:__cluster"),
                      timeout=30) as root:
        cid = root.get("/v3/clusters").json()["data"][0]["cluster_id"]
        for name, pw in users.items():
            r = root.post(f"/v3/clusters/{cid}/users", json={"name": name, "password": pw})
            assert r.status_code == 201, r.text
        for topic in topics:
            r = root.post(f"/v3/clusters/{cid}/topics", json={"topic_name": topic, "partitions_count": 1})
            assert r.status_code == 201, r.text
        for acl in acls:
            r = root.post(f"/v3/clusters/{cid}/acls", json=acl)
            assert r.status_code == 201, r.text
    return cid
