"""The one error table (`infra/error_codes.py`, bound to the node's classes by `ingest_api/error_table.py`):
unique codes, a Kafka code on every row, every raised class covered, no stray codes anywhere in the tree."""

from __future__ import annotations

import ast
import importlib
import io
import pkgutil
import tokenize
import tomllib
from pathlib import Path

import pytest

import lakelog.ingest_api
from lakelog.infra.config import ConfigError
from lakelog.infra.errors import ErrorKind, InvariantViolation, LakelogError
from lakelog.ingest_api import error_table
from lakelog.ingest_api.security.cluster_auth import AuthenticationError
from lakelog.ingest_api.cluster.errors import (
    BrokerNotRegisteredError,
    ClusterError,
    FencedBrokerError,
    NotControllerError,
    QuorumError,
)
from lakelog.infra import error_codes
from lakelog.infra.error_codes import KafkaCode
from lakelog.ingest_api.error_table import (
    ERROR_TABLE,
    KIND_FALLBACK,
    SCHEMA_REGISTRY_TABLE,
    V3_ONLY_TABLE,
    HttpError,
    code_of,
    coordinator_code,
    http_error,
    kafka_code,
    row_of,
)
from lakelog.ingest_api.errors import NodeError, RemoteError, RouteError, TopicExistsError
from lakelog.ingest_api.transactions.errors import TransactionError
from lakelog.ingest_api.groups.errors import ConsumerFormatMismatchError, GroupError, IllegalStateError
from lakelog.ingest_api.security.errors import SecurityError
from lakelog.ingest_api.raft.messages import NO_NODE
from lakelog.tiering.errors import ManifestConflictError, ObjectNotFoundError

ROOT = Path(__file__).resolve().parents[2]
#: Every folder of product code (the packages of pyproject.toml) and the benchmarks.
TREE = [*sorted({path.split(".")[1] for path in tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["package-dir"]}), "bench"]
#: The table itself, the one file that writes codes.
TABLE_FILE = ROOT / "infra" / "error_codes.py"
#: Modules that answer HTTP requests: the HTTP door (every router, the middlewares, the app) and what routers call.
ANSWERING = [*sorted((ROOT / "ingest_api" / "http").rglob("*.py")), ROOT / "ingest_api" / "node.py",
             *sorted((ROOT / "ingest_api" / "groups").glob("consumer*.py")), ROOT / "ingest_api" / "groups" / "service.py"]
#: Errors that carry an answer already made (another node's, the framework's) instead of a row.
RELAYS = (RemoteError, RouteError)
#: Roots of the node's error trees: never raised themselves.
ROOTS = {NodeError, ClusterError, GroupError, SecurityError, QuorumError, TransactionError}


def _all_modules() -> None:
    for info in pkgutil.walk_packages(lakelog.ingest_api.__path__, "lakelog.ingest_api."):
        importlib.import_module(info.name)


def _subclasses(cls: type) -> set[type]:
    out, stack = set(), [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in out:
                out.add(sub)
                stack.append(sub)
    return out


def test_codes_are_unique_and_start_with_their_status() -> None:
    codes = [row.error_code for row in ERROR_TABLE.values()]
    assert len(codes) == len(set(codes))
    assert all(row.error_code // 100 == row.status for row in ERROR_TABLE.values())
    assert set(KIND_FALLBACK) == set(ErrorKind) and all(c in ERROR_TABLE for c in KIND_FALLBACK.values())


def test_the_import_check_refuses_a_duplicate_code(monkeypatch) -> None:
    monkeypatch.setitem(ERROR_TABLE, ConsumerFormatMismatchError,
                        HttpError(409, code_of(IllegalStateError), KafkaCode.INVALID_REQUEST))
    with pytest.raises(AssertionError, match="already"):
        error_table._check_table()
    monkeypatch.setitem(ERROR_TABLE, ConsumerFormatMismatchError, HttpError(404, 40999, KafkaCode.INVALID_REQUEST))
    with pytest.raises(AssertionError, match="does not start with 404"):
        error_table._check_table()


def test_confluent_codes_keep_confluent_meanings() -> None:
    from lakelog.ingest_api.errors import PartitionNotFoundError, TopicNotFoundError
    from lakelog.ingest_api.groups.errors import ConsumerAlreadyExistsError, ConsumerInstanceNotFoundError
    from lakelog.ingest_api.groups.errors import GroupNotFoundError
    from lakelog.ingest_api.security.errors import RequestBodyTimeout, ThrottledError
    assert code_of(TopicNotFoundError) == 40401 and code_of(PartitionNotFoundError) == 40402
    assert code_of(ConsumerInstanceNotFoundError) == 40403 and code_of(GroupNotFoundError) == 40405
    assert code_of(ConsumerFormatMismatchError) == 40601 and code_of(RequestBodyTimeout) == 40801
    assert code_of(ConsumerAlreadyExistsError) == 40902 and code_of(IllegalStateError) == 40903
    assert code_of(ThrottledError) == 42901
    assert http_error(ValueError("boom")) == (500, 50001, "internal error")  # never the exception's text
    # the codes that used to mean two things now mean one
    assert code_of(FencedBrokerError) != code_of(IllegalStateError)
    assert code_of(TopicExistsError) != code_of(ConsumerAlreadyExistsError)


def test_every_node_error_has_a_row() -> None:
    _all_modules()
    missing = sorted(f"{c.__module__}.{c.__qualname__}" for c in _subclasses(NodeError)
                     if row_of(c) is None and not issubclass(c, RELAYS) and c not in ROOTS)
    assert not missing, f"NodeError classes answered only by their kind: {missing}"


def _raised_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Attribute) and target.attr == "from_raft":
                target = target.value
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    return names


def _imported_names(path: Path) -> dict[str, str]:
    """Name -> module of every `from lakelog... import Name` in the file, function-local ones included."""
    names = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lakelog."):
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def test_every_class_the_routers_raise_is_in_the_table() -> None:
    _all_modules()
    checked = 0
    for path in ANSWERING:
        module = importlib.import_module("lakelog." + ".".join(path.relative_to(ROOT).with_suffix("").parts))
        imported = _imported_names(path)
        for name in _raised_names(path):
            cls = getattr(module, name, None)
            if cls is None and name in imported:  # imported inside a function
                cls = getattr(importlib.import_module(imported[name]), name, None)
            if not (isinstance(cls, type) and issubclass(cls, LakelogError)):
                continue  # a re-raise of a caught variable, or a builtin (asyncio.CancelledError, ...)
            checked += 1
            assert row_of(cls) is not None or issubclass(cls, RELAYS), f"{path.name} raises {name}, not in the table"
    assert checked >= 20


def _product_files():
    for folder in TREE:
        for path in sorted(ROOT.joinpath(folder).rglob("*.py")):
            if path != TABLE_FILE:
                yield path


def test_the_tree_covers_every_package_and_the_sql_server() -> None:
    assert {"infra", "ingest_api", "spark_log", "cli", "bench"} <= set(TREE)
    files = {p.relative_to(ROOT).as_posix() for p in _product_files()}
    assert "spark_log/sql_server/endpoint.py" in files and "spark_log/sql_server/users.py" in files


def test_no_error_code_literal_outside_the_table() -> None:
    found = []
    for path in _product_files():
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.NUMBER and tok.string.isdigit() and 40000 <= int(tok.string) < 60000:
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}")
    assert not found, found


def test_no_error_made_with_a_literal_status() -> None:
    """An error (`...Error(...)`, `SqlRefused(...)`) or an answer's body never carries a number
    written in place: its status and code come from a row of the table."""
    found = []
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if func.endswith(("Error", "Refused")):
                    numbers = [a for a in [*node.args, *(k.value for k in node.keywords)]
                               if isinstance(a, ast.Constant) and type(a.value) is int and 400 <= a.value < 600]
                    if numbers:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {func}({numbers[0].value}, ...)")
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if (isinstance(k, ast.Constant) and k.value == "error_code" and isinstance(v, ast.Constant)
                            and type(v.value) is int and v.value >= 400):  # (200: a v3 record's success)
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: error_code {v.value}")
    assert not found, found


def test_every_row_has_a_kafka_code() -> None:
    for rows in (error_codes.ERRORS, error_codes.SCHEMA_REGISTRY, error_codes.V3_ONLY, error_codes.FRAMEWORK):
        for name, row in rows.items():
            assert isinstance(row.kafka, KafkaCode) and row.kafka != 0, name
    for table in (ERROR_TABLE, SCHEMA_REGISTRY_TABLE, V3_ONLY_TABLE):
        for cls, row in table.items():
            assert isinstance(row.kafka, KafkaCode), cls.__name__


def test_kafka_codes_are_kafkas_numbers() -> None:
    from lakelog.ingest_api.errors import NotEnoughReplicasError, NotLeaderOrFollowerError, TopicNotFoundError
    from lakelog.logstore.errors import OutOfOrderSequenceError
    expected = {"NOT_LEADER_OR_FOLLOWER": 6, "UNKNOWN_TOPIC_OR_PARTITION": 3, "REQUEST_TIMED_OUT": 7,
                "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20, "INVALID_REQUEST": 42,
                "TOPIC_ALREADY_EXISTS": 36, "INVALID_CONFIG": 40, "CORRUPT_MESSAGE": 2, "MESSAGE_TOO_LARGE": 10,
                "TOPIC_AUTHORIZATION_FAILED": 29, "SASL_AUTHENTICATION_FAILED": 58, "UNKNOWN_MEMBER_ID": 25,
                "ILLEGAL_GENERATION": 22, "REBALANCE_IN_PROGRESS": 27, "NOT_COORDINATOR": 16,
                "COORDINATOR_LOAD_IN_PROGRESS": 14, "FENCED_LEADER_EPOCH": 74, "UNKNOWN_LEADER_EPOCH": 75,
                "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "INVALID_PRODUCER_EPOCH": 47, "OFFSET_OUT_OF_RANGE": 1,
                "LEADER_NOT_AVAILABLE": 5, "KAFKA_STORAGE_ERROR": 56, "THROTTLING_QUOTA_EXCEEDED": 89,
                "UNKNOWN_SERVER_ERROR": -1}
    assert {name: KafkaCode[name].value for name in expected} == expected
    assert kafka_code(TopicNotFoundError("t")) == KafkaCode.UNKNOWN_TOPIC_OR_PARTITION
    assert kafka_code(NotLeaderOrFollowerError("p")) == 6 and kafka_code(NotEnoughReplicasError("x")) == 19
    assert kafka_code(OutOfOrderSequenceError("s")) == 45
    assert kafka_code(ObjectNotFoundError("k")) == KafkaCode.RESOURCE_NOT_FOUND  # by kind
    assert kafka_code(RemoteError(409, 40907, "fenced")) == KafkaCode.STALE_BROKER_EPOCH  # a relayed answer
    assert kafka_code(ValueError("boom")) == KafkaCode.UNKNOWN_SERVER_ERROR
    assert error_codes.kafka_code_of("TopicExistsError") == KafkaCode.TOPIC_ALREADY_EXISTS


def test_a_coordinator_answers_its_partition_errors_as_codes_clients_retry() -> None:
    # A JoinGroup answered LEADER_NOT_AVAILABLE ends a Java consumer ("unexpected error in join group").
    from lakelog.ingest_api.errors import LeaderNotAvailableError, NotEnoughReplicasError, NotLeaderOrFollowerError
    from lakelog.logstore.errors import OutOfOrderSequenceError
    assert coordinator_code(LeaderNotAvailableError("p")) == KafkaCode.COORDINATOR_NOT_AVAILABLE
    assert coordinator_code(NotEnoughReplicasError("x")) == KafkaCode.COORDINATOR_NOT_AVAILABLE
    assert coordinator_code(NotLeaderOrFollowerError("p")) == KafkaCode.NOT_COORDINATOR
    assert coordinator_code(OutOfOrderSequenceError("s")) == KafkaCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # others as is


def test_every_row_is_bound_to_one_class() -> None:
    assert {c.__name__ for c in ERROR_TABLE} == set(error_codes.ERRORS)
    assert {c.__name__ for c in SCHEMA_REGISTRY_TABLE} == set(error_codes.SCHEMA_REGISTRY)
    assert {c.__name__ for c in V3_ONLY_TABLE} == set(error_codes.V3_ONLY)
    for cls, row in ERROR_TABLE.items():
        assert (row.status, row.error_code, row.kafka) == tuple(vars(error_codes.code(cls.__name__)).values())


def test_the_code_table_refuses_a_duplicate_or_a_wrong_prefix() -> None:
    e = error_codes.ErrorCode
    with pytest.raises(AssertionError, match="already"):
        error_codes.check_rows("t", {"A": e(404, 40401, KafkaCode.INVALID_REQUEST),
                                     "B": e(404, 40401, KafkaCode.INVALID_REQUEST)})
    with pytest.raises(AssertionError, match="does not start with 409"):
        error_codes.check_rows("t", {"A": e(409, 40401, KafkaCode.INVALID_REQUEST)})


def test_one_not_controller_error() -> None:
    from lakelog.ingest_api.cluster import quorum
    assert quorum.NotControllerError is NotControllerError
    e = NotControllerError.from_raft(3, 7)
    assert (e.leader_id, e.term, e.controller_id) == (3, 7, 3)
    assert NotControllerError.from_raft(NO_NODE, 7).controller_id is None
    assert http_error(e)[:2] == (421, code_of(NotControllerError))


def test_subclasses_and_kinds_fall_back_through_the_table() -> None:
    assert http_error(AuthenticationError("bad signature"))[:2] == (401, 40101)  # a case of AuthenticationFailedError
    assert http_error(ConsumerFormatMismatchError("x"))[:2] == (406, 40601)
    assert http_error(BrokerNotRegisteredError("x"))[1] == 40904 and http_error(FencedBrokerError("x"))[1] == 40907
    assert http_error(ConfigError("segment.bytes: too small"))[:2] == (400, 40001)
    assert http_error(ObjectNotFoundError("k"))[:2] == (404, 40410)  # by kind
    assert http_error(ManifestConflictError("m"))[:2] == (503, 50305)  # by kind
    assert http_error(InvariantViolation("hw > leo"))[:2] == (500, 50001)
    assert http_error(RemoteError(409, 40907, "fenced"))[:2] == (409, 40907)
    assert http_error(RouteError(404, "Not Found"))[:2] == (404, 404)
