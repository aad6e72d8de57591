"""The server side of a SCRAM-SHA-256 or SCRAM-SHA-512 exchange (RFC 5802, RFC 7677) over the stored
credentials (pure). H below is the mechanism's hash (SHA-256 or SHA-512).

Messages (UTF-8 text, attributes `name=value` separated by commas):

    client-first   gs2-header client-first-bare     "n,," "n=USER,r=CNONCE"      (no channel binding)
    server-first   "r=CNONCE SNONCE,s=BASE64(salt),i=ITERATIONS"
    client-final   "c=BASE64(gs2-header),r=CNONCE SNONCE,p=BASE64(ClientProof)"
    server-final   "v=BASE64(ServerSignature)"

    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientSignature = HMAC-H(StoredKey, AuthMessage)
    ClientKey       = ClientProof XOR ClientSignature;  accepted iff H(ClientKey) == StoredKey
    ServerSignature = HMAC-H(ServerKey, AuthMessage)

The cluster metadata stores exactly (salt, iterations, StoredKey, ServerKey) per user and mechanism
(`security/credentials.py`), so the password never reaches this node. A user without a credential
of the exchange's mechanism is treated as unknown. An unknown user is answered with a decoy credential's
iterations and a salt derived from its name, and refused at the final message, as a wrong password
is (no user-name oracle).

Every failure raises `AuthenticationFailedError` (answered SASL_AUTHENTICATION_FAILED). The nonce is
passed in, so the exchange is deterministic under test. Concurrency: one exchange per connection.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
from typing import Callable

from lakelog.ingest_api.security.credentials import HASHES, ScramCredential
from lakelog.ingest_api.security.errors import AuthenticationFailedError

MAX_MESSAGE_BYTES = 4096
MAX_NONCE_CHARS = 256
GS2_HEADER = "n,,"


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise AuthenticationFailedError("a malformed SCRAM message")
        out.append((name, value))
    return out


def _username(escaped: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "=", any other "=" is malformed."""
    if escaped.replace("=2C", "").replace("=3D", "").count("="):
        raise AuthenticationFailedError("a malformed SCRAM user name")
    return escaped.replace("=2C", ",").replace("=3D", "=")


def _text(message: bytes) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise AuthenticationFailedError("a SCRAM message over its size limit")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailedError("a SCRAM message that is not UTF-8") from None


class ScramExchange:
    """One SCRAM exchange of `mechanism` (a key of credentials.HASHES): `first(client_first)` then
    `final(client_final)`; `user` once accepted. `lookup(user)` is the user's credential of that mechanism."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], decoy: ScramCredential,
                 server_nonce: str) -> None:
        if decoy.mechanism != mechanism:
            raise ValueError(f"a {decoy.mechanism} decoy for a {mechanism} exchange")
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self._decoy = decoy
        self._server_nonce = server_nonce
        self._credential: ScramCredential | None = None
        self._name = ""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._done = False
        self.user: str | None = None

    @property
    def started(self) -> bool:
        """Whether the client-first message has been answered."""
        return bool(self._nonce)

    def first(self, message: bytes) -> bytes:
        if self._nonce:
            raise AuthenticationFailedError("a second SCRAM client-first message")
        text = _text(message)
        if not text.startswith(GS2_HEADER):  # "y,," / "p=..." ask for channel binding; "n,a=..." an authzid
            raise AuthenticationFailedError("SCRAM without channel binding and without an authorization id only")
        bare = text[len(GS2_HEADER):]
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1] \
                or len(attrs[1][1]) > MAX_NONCE_CHARS or not attrs[1][1].isprintable() or "," in attrs[1][1]:
            raise AuthenticationFailedError("a malformed SCRAM client-first message")
        if any(name == "m" for name, _ in attrs[2:]):  # a mandatory extension (e.g. tokenauth) we do not know
            raise AuthenticationFailedError("SCRAM extensions are not supported")
        self._name = _username(attrs[0][1])
        self._credential = self._lookup(self._name) if self._name else None
        cred = self._credential or self._decoy_for(self._name)
        self._nonce = attrs[1][1] + self._server_nonce
        self._first_bare = bare
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        return self._server_first.encode()

    def _decoy_for(self, name: str) -> ScramCredential:
        """The decoy with a salt of its own per user name (stable while the decoy is), so an unknown name
        is not told apart by a salt shared with every other unknown name."""
        salt = hmac.new(self._decoy.stored_key, name.encode("utf-8", "surrogatepass"), self._hash).digest()[:16]
        return dataclasses.replace(self._decoy, salt=salt)

    def final(self, message: bytes) -> bytes:
        if not self._nonce or self._done:
            raise AuthenticationFailedError("a SCRAM client-final message out of order")
        self._done = True
        text = _text(message)
        attrs = _attributes(text)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise AuthenticationFailedError("a malformed SCRAM client-final message")
        try:
            binding = base64.b64decode(attrs[0][1], validate=True)
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailedError("a malformed SCRAM client-final message") from None
        if binding != GS2_HEADER.encode() or attrs[1][1] != self._nonce:
            raise AuthenticationFailedError("the SCRAM channel binding or nonce does not match")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential or self._decoy_for(self._name)
        signature = hmac.new(cred.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(signature):
            raise AuthenticationFailedError("a SCRAM proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key) \
                or self._credential is None:
            raise AuthenticationFailedError("Authentication failed during authentication due to invalid "
                                            f"credentials with SASL mechanism {self.mechanism}")
        self.user = self._name
        server_signature = hmac.new(cred.server_key, auth_message, self._hash).digest()
        return b"v=" + base64.b64encode(server_signature)

