"""Stored credentials: passwords as SCRAM keeps them (RFC 5802; SCRAM-SHA-256 RFC 7677, and
SCRAM-SHA-512 with SHA-512 as H), and API keys.

A password is never stored, logged or replicated. The node that receives it derives, with a fresh
random salt and H the mechanism's hash (SHA-256: 32-byte keys, SHA-512: 64-byte keys):

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

and the cluster metadata holds `ScramCredential(mechanism, salt, iterations, stored_key,
server_key)` per user and mechanism — exactly the parameters a SCRAM server keeps, so a later SCRAM
exchange can use them. A Kafka admin client sends SaltedPassword itself (AlterUserScramCredentials):
`credential_from_salted_password` derives the same keys from it. HTTP Basic sends the password
itself: verification recomputes StoredKey and compares it in constant time. PBKDF2 is deliberately
slow (4096 iterations at least), so `CredentialCache` remembers a successful check, keyed by an
HMAC of the header under a per-process random key (no password is kept in clear), and is emptied
whenever users change.

API keys are `llk_<id>_<secret>`: `id` (16 hex chars) names the key, `secret` (43 url-safe base64
chars, 256 random bits) is shown once at creation. The metadata holds the id, the principal and
SHA-256(secret): a key is high-entropy, so a fast hash suffices.

Concurrency: pure functions; `CredentialCache` is used from the event loop thread only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections import OrderedDict
from dataclasses import dataclass

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
#: Mechanism -> its hash (hashlib's name); HTTP makes a credential of each for every password.
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096  # RFC 7677's minimum
MAX_ITERATIONS = 1_000_000
SALT_BYTES = 16
MAX_PASSWORD_BYTES = 1024
API_KEY_PREFIX = "llk_"
API_KEY_ID_CHARS = 16
MAX_CACHE_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, "salt": _b64(self.salt), "iterations": self.iterations,
                "stored_key": _b64(self.stored_key), "server_key": _b64(self.server_key)}

    @classmethod
    def from_dict(cls, d: dict) -> "ScramCredential":
        cred = cls(str(d["mechanism"]), _unb64(d["salt"]), int(d["iterations"]), _unb64(d["stored_key"]),
                   _unb64(d["server_key"]))
        size = key_bytes(cred.mechanism)
        if not MIN_ITERATIONS <= cred.iterations <= MAX_ITERATIONS \
                or len(cred.stored_key) != size or len(cred.server_key) != size or not 8 <= len(cred.salt) <= 64:
            raise ValueError(f"not a {cred.mechanism} credential")
        return cred


def key_bytes(mechanism: str) -> int:
    """The size of a mechanism's keys (its hash's digest); ValueError for a mechanism not stored."""
    h = HASHES.get(mechanism)
    if h is None:
        raise ValueError(f"mechanism {mechanism!r} is not one of {', '.join(HASHES)}")
    return hashlib.new(h).digest_size


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s: object) -> bytes:
    if not isinstance(s, str):
        raise ValueError("expected base64 text")
    return base64.b64decode(s, validate=True)


def _keys(password: bytes, salt: bytes, iterations: int, mechanism: str = SCRAM_SHA_256) -> tuple[bytes, bytes]:
    return _salted_keys(mechanism, hashlib.pbkdf2_hmac(HASHES[mechanism], password, salt, iterations))


def _salted_keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of a SaltedPassword."""
    h = HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return hashlib.new(h, client_key).digest(), server_key


def check_password(password: str) -> bytes:
    raw = password.encode("utf-8")
    if not raw:
        raise ValueError("the password is empty")
    if len(raw) > MAX_PASSWORD_BYTES:
        raise ValueError(f"the password is longer than {MAX_PASSWORD_BYTES} bytes")
    return raw


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")


def make_credential(password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None,
                    mechanism: str = SCRAM_SHA_256) -> ScramCredential:
    """A new credential of `mechanism` for `password` with a fresh random salt."""
    _check_iterations(iterations)
    key_bytes(mechanism)
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    stored, server = _keys(check_password(password), salt, iterations, mechanism)
    return ScramCredential(mechanism, salt, iterations, stored, server)


def credential_from_salted_password(mechanism: str, salt: bytes, iterations: int,
                                    salted_password: bytes) -> ScramCredential:
    """The credential whose SaltedPassword a client computed itself (Kafka's AlterUserScramCredentials
    sends salt, iterations and SaltedPassword, never the password); ValueError when malformed."""
    _check_iterations(iterations)
    if len(salted_password) != key_bytes(mechanism):
        raise ValueError(f"a {mechanism} salted password is {key_bytes(mechanism)} bytes")
    if not 8 <= len(salt) <= 64:
        raise ValueError("the salt must be 8 to 64 bytes")
    stored, server = _salted_keys(mechanism, salted_password)
    return ScramCredential(mechanism, bytes(salt), iterations, stored, server)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the credential's (constant-time comparison of StoredKey)."""
    raw = password.encode("utf-8", "surrogatepass")
    if not raw or len(raw) > MAX_PASSWORD_BYTES:
        return False
    stored, _ = _keys(raw, credential.salt, credential.iterations, credential.mechanism)
    return hmac.compare_digest(stored, credential.stored_key)


# ------------------------------------------------------------------------------------ API keys

@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str
    principal: str
    secret_sha256: bytes

    def to_dict(self) -> dict:
        return {"key_id": self.key_id, "principal": self.principal, "secret_sha256": self.secret_sha256.hex()}


def new_api_key() -> tuple[str, str, bytes]:
    """(key id, the full key to hand out once, SHA-256 of its secret)."""
    key_id = secrets.token_hex(API_KEY_ID_CHARS // 2)
    secret = secrets.token_urlsafe(32)
    return key_id, f"{API_KEY_PREFIX}{key_id}_{secret}", hashlib.sha256(secret.encode("ascii")).digest()


def parse_api_key(token: str) -> tuple[str, bytes] | None:
    """(key id, SHA-256 of the secret) of a well-formed key, else None."""
    if not token.startswith(API_KEY_PREFIX) or len(token) > 128:
        return None
    rest = token[len(API_KEY_PREFIX):]
    key_id, sep, secret = rest.partition("_")
    if not sep or len(key_id) != API_KEY_ID_CHARS or not secret or not secret.isascii():
        return None
    return key_id, hashlib.sha256(secret.encode("ascii")).digest()


class CredentialCache:
    """Authorization header -> principal, for headers that verified; bounded, LRU, cleared on user changes.

    Keys are HMAC-SHA256 of the header value under a random per-process key, so the cache holds
    no password or API key in clear.
    """

    def __init__(self, max_entries: int = MAX_CACHE_ENTRIES) -> None:
        self._key = os.urandom(32)
        self._entries: OrderedDict[bytes, str] = OrderedDict()
        self._max = max_entries
        self.version = -1

    def _digest(self, header: str) -> bytes:
        return hmac.new(self._key, header.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def get(self, header: str, version: int) -> str | None:
        if version != self.version:
            self._entries.clear()
            self.version = version
            return None
        d = self._digest(header)
        principal = self._entries.get(d)
        if principal is not None:
            self._entries.move_to_end(d)
        return principal

    def put(self, header: str, version: int, principal: str) -> None:
        if version != self.version:
            self._entries.clear()
            self.version = version
        self._entries[self._digest(header)] = principal
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)
