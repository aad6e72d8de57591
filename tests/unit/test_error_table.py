"""The one error table (`ingest_api/error_table.py`): unique codes, every raised class covered, no stray codes."""

from __future__ import annotations

import ast
import importlib
import io
import pkgutil
import tokenize
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
from lakelog.ingest_api.error_table import ERROR_TABLE, KIND_FALLBACK, HttpError, code_of, http_error, row_of
from lakelog.ingest_api.errors import NodeError, RemoteError, RouteError, TopicExistsError
from lakelog.ingest_api.groups.errors import ConsumerFormatMismatchError, GroupError, IllegalStateError
from lakelog.ingest_api.security.errors import SecurityError
from lakelog.ingest_api.raft.messages import NO_NODE
from lakelog.tiering.errors import ManifestConflictError, ObjectNotFoundError

ROOT = Path(__file__).resolve().parents[2]
#: Modules that answer HTTP requests: the HTTP door (every router, the middlewares, the app) and what routers call.
ANSWERING = [*sorted((ROOT / "ingest_api" / "http").rglob("*.py")), ROOT / "ingest_api" / "node.py",
             *sorted((ROOT / "ingest_api" / "groups").glob("consumer*.py")), ROOT / "ingest_api" / "groups" / "service.py"]
#: Errors that carry an answer already made (another node's, the framework's) instead of a row.
RELAYS = (RemoteError, RouteError)
#: Roots of the node's error trees: never raised themselves.
ROOTS = {NodeError, ClusterError, GroupError, SecurityError, QuorumError}


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
    monkeypatch.setitem(ERROR_TABLE, ConsumerFormatMismatchError, HttpError(409, code_of(IllegalStateError)))
    with pytest.raises(AssertionError, match="already"):
        error_table._check_table()
    monkeypatch.setitem(ERROR_TABLE, ConsumerFormatMismatchError, HttpError(404, 40999))
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


def test_no_error_code_literal_outside_the_table() -> None:
    found = []
    for path in ROOT.joinpath("ingest_api").rglob("*.py"):
        if path.name == "error_table.py":
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.NUMBER and tok.string.isdigit() and 40000 <= int(tok.string) < 60000:
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}")
    assert not found, found


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
