"""`ObjectStore.list_after` on S3 (moto's server over HTTP, a real subprocess) against the
filesystem store: ListObjectsV2 with StartAfter under the store's key prefix, MaxKeys cut to the
limit, and pages past S3's 1,000 keys followed by their continuation token."""

from __future__ import annotations

import concurrent.futures
import uuid

import pytest

from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.s3_store import S3Store
from tests.support.s3server import S3Server

KEYS = [f"log/{v:020d}.json" for v in range(1_005)] + ["log/_last_checkpoint", "log/_sidecars/a.parquet",
                                                      "logs/other", "a/before"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    server = S3Server().start()
    try:
        bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
        server.create_bucket(bucket)
        env = server.env()
        s3 = S3Store(bucket, "tier", endpoint_url=server.endpoint_url, region=env.get("AWS_DEFAULT_REGION"),
                     access_key_id=env.get("AWS_ACCESS_KEY_ID"), secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"))
        fs = FileSystemStore(tmp_path_factory.mktemp("list-after"))
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda k: (s3.put(k, b"x"), fs.put(k, b"x")), KEYS))
        yield s3, fs
        s3.close()
    finally:
        server.stop()


@pytest.mark.parametrize("prefix,after,limit", [
    ("log/", "log/", 2_000),                                 # every page, in order
    ("log/", f"log/{990:020d}", 5),                          # one short page from mid-way
    ("log/", f"log/{990:020d}.json", 2_000),                 # from mid-way to the end, _-names last
    ("log/", f"log/{3:020d}", 1_002),                        # more than one page, cut at the limit
    ("log", "log/_last", 10),                                # a prefix inside a name: logs/ too
    ("", "", 3),
    ("log/", "log/zzz", 10),                                 # nothing after
])
def test_list_after_on_s3_is_the_filesystem_stores(stores, prefix, after, limit):
    s3, fs = stores
    expected = sorted(k for k in KEYS if k.startswith(prefix) and k > after)[:limit]
    before = s3.stats.snapshot()["requests"]["LIST"]
    got = s3.list_after(prefix, after, limit)
    assert [o.key for o in got] == expected == [o.key for o in fs.list_after(prefix, after, limit)]
    assert all(o.size == 1 for o in got)
    assert s3.stats.snapshot()["requests"]["LIST"] - before == max(1, -(-len(expected) // 1_000))
