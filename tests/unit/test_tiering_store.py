"""The object-store seam: the filesystem store's semantics (conditional writes, atomicity, ranges,
listing), key and URL validation, FileSlice payloads, and the byte-bounded LRU cache."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lakelog.tiering.cache import ByteLRUCache
from lakelog.tiering.errors import (
    InvalidObjectKeyError,
    ObjectNotFoundError,
    PreconditionFailed,
    PreconditionFailedError,
    StoreConfigurationError,
)
from lakelog.tiering.fs_store import LOCK_DIR, TMP_DIR, FileSystemStore
from lakelog.tiering.s3_store import check_bucket_name
from lakelog.tiering.store import FileSlice, check_key
from lakelog.tiering.stores import open_store


@pytest.fixture
def store(tmp_path) -> FileSystemStore:
    return FileSystemStore(tmp_path / "remote")


def test_put_get_head_and_etags(store):
    e1 = store.put("t-0/a.log", b"hello")
    assert store.get("t-0/a.log") == (b"hello", e1)
    info = store.head("t-0/a.log")
    assert (info.key, info.size, info.etag) == ("t-0/a.log", 5, e1)
    e2 = store.put("t-0/a.log", b"world")
    assert e2 != e1 and store.get("t-0/a.log")[1] == e2
    with pytest.raises(ObjectNotFoundError):
        store.get("t-0/missing")
    with pytest.raises(ObjectNotFoundError):
        store.head("t-0/missing")


def test_put_if_absent(store):
    etag = store.put_if_absent("t-0/manifest.json", b"v1")
    with pytest.raises(PreconditionFailed):  # the documented name of PreconditionFailedError
        store.put_if_absent("t-0/manifest.json", b"v2")
    assert store.get("t-0/manifest.json") == (b"v1", etag)
    assert PreconditionFailed is PreconditionFailedError


def test_put_if_match(store):
    e1 = store.put_if_absent("k", b"v1")
    e2 = store.put_if_match("k", b"v2", e1)
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("k", b"v3", e1)  # stale etag
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("missing", b"v3", e1)
    assert store.get("k") == (b"v2", e2)


def test_get_range(store):
    store.put("k", bytes(range(100)))
    assert store.get_range("k", 10, 20) == bytes(range(10, 20))
    assert store.get_range("k", 90, 200) == bytes(range(90, 100))  # short at the end
    assert store.get_range("k", 100, 200) == b""
    assert store.get_range("k", 5, 5) == b""
    with pytest.raises(ObjectNotFoundError):
        store.get_range("nope", 0, 1)


def test_list_is_a_key_prefix_and_hides_internals(store):
    for key in ["orders-0/a", "orders-0/b", "orders-1/a", "orders-10/x", "other/y"]:
        store.put(key, b"x")
    keys = lambda p: [o.key for o in store.list(p)]  # noqa: E731
    assert keys("orders-1") == ["orders-1/a", "orders-10/x"]
    assert keys("orders-1/") == ["orders-1/a"]
    assert keys("") == ["orders-0/a", "orders-0/b", "orders-1/a", "orders-10/x", "other/y"]
    assert keys("zzz") == []
    assert all(o.size == 1 for o in store.list(""))
    assert (store.root / TMP_DIR).is_dir() and (store.root / LOCK_DIR).is_dir()


def test_list_after_starts_after_a_key_and_stops_at_the_limit(store):
    for key in ["log/0001.json", "log/0002.crc", "log/0002.json", "log/0003.json", "log/_last", "log/sub/x", "other/y"]:
        store.put(key, b"x")
    keys = lambda prefix, after, limit: [o.key for o in store.list_after(prefix, after, limit)]  # noqa: E731
    assert keys("log/", "log/0002", 10) == ["log/0002.crc", "log/0002.json", "log/0003.json", "log/_last", "log/sub/x"]
    assert keys("log/", "log/0002.json", 1) == ["log/0003.json"]
    assert keys("log/", "log/", 2) == ["log/0001.json", "log/0002.crc"]
    assert keys("log/", "log/zzz", 5) == [] and keys("nope/", "", 5) == []
    assert all(o.size == 1 for o in store.list_after("log/", "", 10))
    with pytest.raises(ValueError):
        store.list_after("log/", "", 0)
    # The same keys as `list` after `start_after`, for any prefix (inside a name too) and start.
    for prefix in ["", "log/", "log/0", "log/00", "log/s", "log/sub/", "o"]:
        for after in ["", "log/", "log/0002", "log/0002.json", "log/sub", "log/sub/x", "other/", "z"]:
            for limit in (1, 2, 100):
                assert keys(prefix, after, limit) == [o.key for o in store.list(prefix) if o.key > after][:limit]


def test_delete_is_idempotent_and_prunes_empty_directories(store):
    store.put("a/b/c", b"x")
    store.delete("a/b/c")
    store.delete("a/b/c")
    store.delete_many(["a/b/c", "nope/x"])
    assert not (store.root / "a").exists()
    store.put("a/b/c", b"y")  # directories are re-created
    assert store.get("a/b/c")[0] == b"y"


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/./b", "a/../b", "a/.lakelog-tmp/x", "a\\b", "a\nb",
                                 "x" * 1025])
def test_invalid_keys_are_refused(store, key):
    with pytest.raises(InvalidObjectKeyError):
        check_key(key)
    with pytest.raises(InvalidObjectKeyError):
        store.put(key, b"x")


def test_file_slice_payload_uploads_only_its_range(store, tmp_path):
    path = tmp_path / "seg.log"
    path.write_bytes(bytes(range(256)) * 40)
    fd = os.open(path, os.O_RDONLY)
    try:
        piece = FileSlice(fd, 100, 9000)
        assert len(piece) == 8900
        etag = store.put("k", piece)
        assert store.get("k") == ((bytes(range(256)) * 40)[100:9000], etag)
        piece.seek(0)
        assert piece.read(3) == bytes([100, 101, 102]) and piece.tell() == 3
    finally:
        os.close(fd)


def test_no_partial_object_is_ever_visible(store):
    """Readers racing a writer see a whole old or a whole new object."""
    versions = [bytes([i]) * 200_000 for i in range(8)]
    store.put("k", versions[0])
    stop = threading.Event()
    seen = []

    def reader():
        while not stop.is_set():
            data, _ = store.get("k")
            seen.append(data in versions)

    t = threading.Thread(target=reader)
    t.start()
    for v in versions[1:] * 3:
        store.put("k", v)
    stop.set()
    t.join()
    assert seen and all(seen)


def test_racing_put_if_absent_has_exactly_one_winner(store):
    barrier = threading.Barrier(8)

    def attempt(i):
        barrier.wait()
        try:
            store.put_if_absent("k", f"writer {i}".encode())
            return i
        except PreconditionFailedError:
            return None

    with ThreadPoolExecutor(8) as pool:
        winners = [w for w in pool.map(attempt, range(8)) if w is not None]
    assert len(winners) == 1
    assert store.get("k")[0] == f"writer {winners[0]}".encode()


def _cas_increment(store, key: str, times: int) -> int:
    conflicts = 0
    for _ in range(times):
        while True:
            data, etag = store.get(key)
            try:
                store.put_if_match(key, str(int(data) + 1).encode(), etag)
                break
            except PreconditionFailedError:
                conflicts += 1
    return conflicts


def test_compare_and_swap_loses_no_update_across_threads(store):
    store.put("counter", b"0")
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda _: _cas_increment(store, "counter", 40), range(6)))
    assert store.get("counter")[0] == b"240"


def test_compare_and_swap_loses_no_update_across_processes(store):
    store.put("counter", b"0")
    code = ("import sys; from lakelog.tiering.fs_store import FileSystemStore;"
            "from tests.unit.test_tiering_store import _cas_increment;"
            "_cas_increment(FileSystemStore(sys.argv[1]), 'counter', 30)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(store.root)],
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
             for _ in range(3)]
    _cas_increment(store, "counter", 30)
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert store.get("counter")[0] == b"120"


def test_stale_temp_files_are_removed_on_open(tmp_path):
    s = FileSystemStore(tmp_path / "r")
    stale = s.root / TMP_DIR / "old.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = s.root / TMP_DIR / "new.tmp"
    fresh.write_bytes(b"x")
    FileSystemStore(tmp_path / "r")
    assert not stale.exists() and fresh.exists()


def test_stats_count_requests_and_bytes(store):
    store.put("k", b"12345")
    store.get("k")
    store.get_range("k", 0, 2)
    store.list("")
    store.delete("k")
    snap = store.stats.snapshot()
    assert snap["requests"] == {"PUT": 1, "GET": 2, "HEAD": 0, "LIST": 1, "DELETE": 1}
    assert (snap["bytes_written"], snap["bytes_read"]) == (5, 7)


def test_open_store_urls(tmp_path):
    s = open_store(f"file://{tmp_path}/r")
    assert isinstance(s, FileSystemStore) and s.url == f"file://{tmp_path}/r"
    for bad in ["ftp://x/y", "file://host/path", "file:relative", "s3://Bad_Bucket/x", "s3://ab"]:
        with pytest.raises(StoreConfigurationError):
            open_store(bad)


def test_open_store_s3_url_parses_bucket_and_prefix():
    s = open_store("s3://lakelog-data/tier/one/", endpoint_url="http://127.0.0.1:1", region="us-east-1",
                   access_key_id="x", secret_access_key="y")
    try:
        assert (s.bucket, s.prefix, s.url) == ("lakelog-data", "tier/one", "s3://lakelog-data/tier/one")
    finally:
        s.close()


@pytest.mark.parametrize("name", ["lakelog", "my.bucket-1", "a" * 63, "abc"])
def test_valid_bucket_names(name):
    assert check_bucket_name(name) == name


@pytest.mark.parametrize("name", ["ab", "a" * 64, "Upper", "under_score", "-dash", "dash-", "a..b", "a.-b",
                                  "192.168.1.1", "xn--abc", "name-s3alias", ""])
def test_invalid_bucket_names(name):
    with pytest.raises(StoreConfigurationError):
        check_bucket_name(name)


# ---------------------------------------------------------------------------------------------
# the LRU cache


def test_cache_is_bounded_by_bytes_and_evicts_least_recently_used():
    c: ByteLRUCache = ByteLRUCache(100)
    for k in "abcd":
        c.get_or_load(k, lambda: (k, 30))
    assert len(c) == 3 and c.size_in_bytes == 90 and "a" not in c
    c.get_or_load("b", lambda: pytest.fail("cached"))  # b becomes most recent
    c.get_or_load("e", lambda: ("e", 30))
    assert "c" not in c and "b" in c
    c.get_or_load("huge", lambda: ("h", 1000))
    assert "huge" not in c  # too big to keep, but returned
    snap = c.snapshot()
    assert (snap["hits"], snap["misses"], snap["evictions"]) == (1, 6, 2)


def test_cache_deduplicates_concurrent_loads_and_shares_errors():
    c: ByteLRUCache = ByteLRUCache(1000)
    calls = []
    gate = threading.Event()

    def slow():
        calls.append(1)
        gate.wait(5)
        return "v", 1

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(c.get_or_load, "k", slow) for _ in range(4)]
        time.sleep(0.05)
        gate.set()
        assert [f.result() for f in futures] == ["v"] * 4
    assert len(calls) == 1

    def boom():
        raise ValueError("x")

    with pytest.raises(ValueError):
        c.get_or_load("bad", boom)
    assert "bad" not in c


def test_prefetch_is_bounded_and_a_failed_prefetch_is_retried_by_the_reader():
    c: ByteLRUCache = ByteLRUCache(1000, max_pending=2)
    gate = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        started = [c.prefetch(i, lambda i=i: (gate.wait(5), 1) and (i, 1), pool) for i in range(4)]
        assert started == [True, True, False, False]
        gate.set()
        assert c.get_or_load(0, lambda: pytest.fail("prefetched")) == 0
        assert c.prefetch(0, lambda: ("x", 1), pool) is False  # cached

        def fail():
            raise OSError("transient")

        c.prefetch("f", fail, pool)
        assert c.get_or_load("f", lambda: ("ok", 1)) == "ok"
