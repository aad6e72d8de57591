"""SASL on the Kafka door without a node: the SCRAM-SHA-256 server exchange (RFC 7677's own example as a
golden vector), SCRAM-SHA-512 against a client written from RFC 5802, PLAIN messages, the listener
closing a connection that skips authentication, the listener settings a node refuses, and quotas
answered with a throttle time."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
import struct
from types import SimpleNamespace

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from lakelog.cli.cluster_spec import build_spec
from lakelog.infra.config import ConfigError
from lakelog.ingest_api.config.kafka import KafkaListener, check_listener_security, parse_listeners
from lakelog.ingest_api.kafka import codec, throttle
from lakelog.ingest_api.kafka.metadata_apis import api_versions_table
from lakelog.ingest_api.kafka.sasl_apis import parse_plain
from lakelog.ingest_api.kafka.scram import ScramExchange
from lakelog.ingest_api.kafka.server import KafkaServer
from lakelog.ingest_api.security.context import CLUSTER_PRINCIPAL
from lakelog.ingest_api.security.credentials import (SCRAM_SHA_256, SCRAM_SHA_512, credential_from_salted_password,
                                                       make_credential)
from lakelog.ingest_api.security.errors import AuthenticationFailedError
from lakelog.ingest_api.security.quotas import QuotaLimits, QuotaManager

# RFC 7677 section 3: user "user", password "pencil".
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST = b"n,,n=user,r=" + CLIENT_NONCE.encode()
SERVER_FIRST = b"r=" + (CLIENT_NONCE + SERVER_NONCE).encode() + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=" + (CLIENT_NONCE + SERVER_NONCE).encode()
                + b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

USERS = {"user": make_credential("pencil", 4096, SALT)}
DECOY = make_credential("decoy-password", 4096)


def _exchange() -> ScramExchange:
    return ScramExchange(SCRAM_SHA_256, USERS.get, DECOY, SERVER_NONCE)


def _client_final(password: str, server_first: bytes, client_first: bytes = CLIENT_FIRST, h: str = "sha256") -> bytes:
    """A client's final message for `password` (RFC 5802's client side, hash `h`)."""
    attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    without_proof = f"c=biws,r={attrs['r']}".encode()
    auth = client_first[3:] + b"," + server_first + b"," + without_proof
    signature = hmac.new(hashlib.new(h, client_key).digest(), auth, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return without_proof + b",p=" + base64.b64encode(proof)


def test_scram_sha_512_accepts_the_password_and_its_salted_form_and_refuses_another():
    cred = make_credential("pencil", 4096, SALT, mechanism=SCRAM_SHA_512)
    assert len(cred.stored_key) == len(cred.server_key) == 64
    # What a Kafka admin client sends (AlterUserScramCredentials) makes the same credential.
    salted = hashlib.pbkdf2_hmac("sha512", b"pencil", SALT, 4096)
    assert credential_from_salted_password(SCRAM_SHA_512, SALT, 4096, salted) == cred
    with pytest.raises(ValueError):  # a SHA-256-sized salted password for SHA-512
        credential_from_salted_password(SCRAM_SHA_512, SALT, 4096, salted[:32])
    decoy = make_credential("decoy-password", 4096, mechanism=SCRAM_SHA_512)
    users = {"user": cred}
    ok = ScramExchange(SCRAM_SHA_512, users.get, decoy, SERVER_NONCE)
    first = ok.first(CLIENT_FIRST)
    final = ok.final(_client_final("pencil", first, h="sha512"))
    assert ok.user == "user" and final.startswith(b"v=") and len(base64.b64decode(final[2:])) == 64
    wrong = ScramExchange(SCRAM_SHA_512, users.get, decoy, SERVER_NONCE)
    with pytest.raises(AuthenticationFailedError, match="SCRAM-SHA-512"):
        wrong.final(_client_final("crayon", wrong.first(CLIENT_FIRST), h="sha512"))
    with pytest.raises(ValueError):  # a decoy of the other mechanism is a wiring mistake
        ScramExchange(SCRAM_SHA_512, users.get, DECOY, SERVER_NONCE)


def test_scram_sha_256_answers_rfc_7677s_example_byte_for_byte():
    ex = _exchange()
    assert ex.first(CLIENT_FIRST) == SERVER_FIRST
    assert ex.user is None
    assert ex.final(CLIENT_FINAL) == SERVER_FINAL
    assert ex.user == "user"


def test_a_wrong_password_an_unknown_user_and_a_changed_nonce_are_refused():
    assert _client_final("pencil", SERVER_FIRST) == CLIENT_FINAL  # the test's client agrees with the RFC
    ex = _exchange()
    with pytest.raises(AuthenticationFailedError):
        ex.final(_client_final("crayon", ex.first(CLIENT_FIRST)))
    assert ex.user is None
    unknown = _exchange()
    nobody = b"n,,n=nobody,r=" + CLIENT_NONCE.encode()
    first = unknown.first(nobody)
    assert b",i=4096" in first and first != _exchange().first(b"n,,n=nobody2,r=" + CLIENT_NONCE.encode())
    assert first == _exchange().first(nobody)  # answered like a known user: a salt of its own, stable ...
    with pytest.raises(AuthenticationFailedError):  # ... and refused at the end, even with the decoy's password
        unknown.final(_client_final("decoy-password", first, nobody))
    assert unknown.user is None
    nonce = _exchange()
    nonce.first(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailedError):
        nonce.final(CLIENT_FINAL.replace(b"k0,p=", b"k1,p="))
    with pytest.raises(AuthenticationFailedError):  # no second try on the same exchange
        nonce.final(CLIENT_FINAL)


@pytest.mark.parametrize("message", [b"", b"y,,n=user,r=abc", b"n,a=other,n=user,r=abc", b"n,,r=abc,n=user",
                                     b"n,,n=user", b"n,,n=us=er,r=abc", b"n,,n=user,r=abc,m=ext", b"\xff\xfe",
                                     b"n,,n=user,r=" + b"a" * 5000])
def test_malformed_client_first_messages_are_refused(message):
    with pytest.raises(AuthenticationFailedError):
        _exchange().first(message)


def test_a_final_message_before_the_first_is_refused():
    with pytest.raises(AuthenticationFailedError):
        _exchange().final(CLIENT_FINAL)


def test_user_names_are_unescaped():
    users = {"a,b=c": make_credential("pw", 4096)}
    ex = ScramExchange(SCRAM_SHA_256, users.get, DECOY, "srv")
    first = ex.first(b"n,,n=a=2Cb=3Dc,r=cli")
    assert b"s=" + base64.b64encode(users["a,b=c"].salt) in first


def test_plain_messages():
    assert parse_plain(b"\0alice\0secret") == ("alice", "secret")
    assert parse_plain(b"alice\0alice\0secret") == ("alice", "secret")
    for bad in (b"bob\0alice\0secret", b"alice\0secret", b"\0\0secret", b"\0alice\0", b"\0al\xffice\0pw"):
        with pytest.raises(AuthenticationFailedError):
            parse_plain(bad)


def test_listener_security_settings():
    sasl = parse_listeners("http://0.0.0.0:8080,SASL_PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9093",
                           "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL")
    assert [x.security_protocol for x in sasl] == ["SASL_PLAINTEXT", "SASL_SSL"]
    check_listener_security(sasl, authentication_enabled=True, tls_enabled=True)
    with pytest.raises(ConfigError, match="ssl.certfile"):  # SASL_SSL needs the node's certificate
        check_listener_security(sasl, authentication_enabled=True, tls_enabled=False)
    plain = parse_listeners("http://0.0.0.0:8080,PLAINTEXT://0.0.0.0:9092", "PLAINTEXT:PLAINTEXT")
    check_listener_security(plain, authentication_enabled=False, tls_enabled=False)
    with pytest.raises(ConfigError, match="SASL_PLAINTEXT"):
        check_listener_security(plain, authentication_enabled=True, tls_enabled=False)
    ssl_only = parse_listeners("http://0.0.0.0:8080,SSL://0.0.0.0:9092", "SSL:SSL")
    check_listener_security(ssl_only, authentication_enabled=False, tls_enabled=True)
    with pytest.raises(ConfigError, match="SASL_SSL"):  # TLS alone is not authentication
        check_listener_security(ssl_only, authentication_enabled=True, tls_enabled=True)


async def _handler(req: codec.Request, conn) -> object:
    return codec.to_entity(codec.response_class(18, req.api_version),
                           {"error_code": 0, "api_keys": api_versions_table(), "throttle_time": 0})


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def test_a_sasl_listener_answers_api_versions_and_closes_on_anything_else_before_authentication():
    async def run() -> None:
        server = KafkaServer([KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT")], _handler,
                             api_versions_table, max_frame_bytes=1024 * 1024, max_connections=10,
                             idle_timeout_ms=60_000, max_in_flight=4)
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.bound_ports["SASL_PLAINTEXT"])
            w.write(codec.encode_request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 7))
            assert struct.unpack_from(">i", await asyncio.wait_for(_read_frame(r), 10))[0] == 7
            w.write(codec.encode_request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m",
                                                          group_instance_id=None), 8))
            assert await asyncio.wait_for(r.read(100), 10) == b""  # closed, unanswered
            w.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_lakelog_up_serves_sasl_plaintext_kafka_ports_when_the_cluster_authenticates(tmp_path):
    secured = build_spec(1, tmp_path / "a", node_overrides={"authentication.enabled": "true"}, kafka_port=19092)
    assert secured.node_listeners(1).endswith(",SASL_PLAINTEXT://127.0.0.1:19092")
    plain = build_spec(1, tmp_path / "b", kafka_port=19092)
    assert plain.node_listeners(1).endswith(",PLAINTEXT://127.0.0.1:19092")


def _produce_request(size: int) -> codec.Request:
    body = ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1), topic_data=(
        TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=b"x" * size),)),))
    return codec.Request(0, 9, 1, "c", body)


def test_a_principal_over_its_byte_rate_gets_a_throttle_time_and_the_cluster_never_does():
    security = SimpleNamespace(quotas=QuotaManager(QuotaLimits(producer_byte_rate=1000)), refresh=lambda: None)
    req = _produce_request(5000)
    assert throttle.admit(security, "User:a", req) == 0
    throttle.charge(security, "User:a", req, None)  # 5 s worth of bytes at once
    assert 0 < throttle.admit(security, "User:a", req) <= throttle.MAX_THROTTLE_MS
    assert throttle.admit(security, "User:b", req) == 0  # a bucket per principal
    for principal in (CLUSTER_PRINCIPAL, None):  # the cluster itself; a connection not yet authenticated
        throttle.charge(security, principal, req, None)
        assert throttle.admit(security, principal, req) == 0
