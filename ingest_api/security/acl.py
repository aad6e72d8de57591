"""Kafka-style ACLs and the authorizer that evaluates them (pure).

An ACL binding is (principal, host, resource type, pattern type, resource name, operation,
permission):

    principal      "User:alice", or "User:*" for every principal
    host           "*" (bindings are not limited by client address in this release)
    resource type  TOPIC, GROUP, SUBJECT (a Schema Registry subject), TRANSACTIONAL_ID (a producer's
                   transactional.id) or CLUSTER (the cluster's one resource is named "kafka-cluster")
    pattern type   LITERAL (the exact name, or "*" for every resource of the type) or PREFIXED
    operation      READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE or ALL
    permission     ALLOW or DENY

Decision for (principal, operation, resource), as Kafka's StandardAuthorizer makes it:
  1. a super user is allowed everything;
  2. the bindings that match are those whose principal is the principal or "User:*", whose pattern
     covers the resource name, and whose operation is the operation or ALL — where an ALLOW of
     READ, WRITE, DELETE or ALTER also implies DESCRIBE;
  3. any matching DENY refuses (deny wins); else any matching ALLOW allows;
  4. with no matching binding: allowed only if `allow.everyone.if.no.acl.found` is on and no
     binding at all names the resource (for any principal).

`Authorizer` memoises decisions per (principal, operation, resource type, name), and is rebuilt
(the memo emptied) whenever the ACL set changes. Concurrency: one thread (the event loop).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
MAX_ACLS = 100_000
MAX_PRINCIPAL_CHARS = 256
MAX_RESOURCE_NAME_CHARS = 255
_MEMO_MAX = 100_000


class ResourceType(str, enum.Enum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    SUBJECT = "SUBJECT"  # a Schema Registry subject
    CLUSTER = "CLUSTER"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"  # a producer's transactional.id (Kafka's TransactionalId)


class PatternType(str, enum.Enum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Operation(str, enum.Enum):
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    ALL = "ALL"


class Permission(str, enum.Enum):
    ALLOW = "ALLOW"
    DENY = "DENY"


#: An ALLOW of one of these implies DESCRIBE (Kafka's rule).
_IMPLIES_DESCRIBE = frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})


def _enum(cls, value: object, what: str):
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    try:
        return cls(value.upper())
    except ValueError:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(m.value for m in cls)}") from None


def check_principal(principal: object) -> str:
    if not isinstance(principal, str) or not principal.startswith("User:") or len(principal) <= 5 \
            or len(principal) > MAX_PRINCIPAL_CHARS or not principal.isprintable():
        raise ValueError("principal must look like User:NAME")
    return principal


@dataclass(frozen=True, slots=True)
class AclBinding:
    principal: str
    resource_type: ResourceType
    pattern_type: PatternType
    resource_name: str
    operation: Operation
    permission: Permission
    host: str = WILDCARD

    @classmethod
    def from_dict(cls, d: dict) -> "AclBinding":
        if not isinstance(d, dict):
            raise ValueError("an ACL must be an object")
        name = d.get("resource_name")
        if not isinstance(name, str) or not name or len(name) > MAX_RESOURCE_NAME_CHARS or not name.isprintable():
            raise ValueError("resource_name must be 1 to 255 printable characters")
        host = d.get("host", WILDCARD)
        if host != WILDCARD:
            raise ValueError("host must be '*' (ACLs by client address are not supported)")
        rtype = _enum(ResourceType, d.get("resource_type"), "resource_type")
        pattern = _enum(PatternType, d.get("pattern_type", "LITERAL"), "pattern_type")
        if rtype is ResourceType.CLUSTER and name != CLUSTER_NAME:
            raise ValueError(f"the CLUSTER resource is named {CLUSTER_NAME!r}")
        if pattern is PatternType.PREFIXED and name == WILDCARD:
            raise ValueError("a PREFIXED pattern cannot be '*'")
        return cls(check_principal(d.get("principal")), rtype, pattern, name,
                   _enum(Operation, d.get("operation"), "operation"),
                   _enum(Permission, d.get("permission"), "permission"), WILDCARD)

    def to_dict(self) -> dict:
        return {"principal": self.principal, "host": self.host, "resource_type": self.resource_type.value,
                "pattern_type": self.pattern_type.value, "resource_name": self.resource_name,
                "operation": self.operation.value, "permission": self.permission.value}

    def sort_key(self) -> tuple:
        return (self.resource_type.value, self.resource_name, self.pattern_type.value, self.principal,
                self.operation.value, self.permission.value)

    def covers(self, name: str) -> bool:
        if self.pattern_type is PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)


@dataclass(frozen=True)
class AclFilter:
    """Matches bindings field by field; None matches anything (the v3 list/delete query)."""

    principal: str | None = None
    resource_type: ResourceType | None = None
    pattern_type: PatternType | None = None
    resource_name: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    @classmethod
    def from_params(cls, params: dict) -> "AclFilter":
        def opt(key, enum_cls=None):
            v = params.get(key)
            if v in (None, "", "ANY", "any"):
                return None
            return _enum(enum_cls, v, key) if enum_cls else str(v)
        return cls(opt("principal"), opt("resource_type", ResourceType), opt("pattern_type", PatternType),
                   opt("resource_name"), opt("operation", Operation), opt("permission", Permission))

    def matches(self, b: AclBinding) -> bool:
        return ((self.principal is None or b.principal == self.principal)
                and (self.resource_type is None or b.resource_type is self.resource_type)
                and (self.pattern_type is None or b.pattern_type is self.pattern_type)
                and (self.resource_name is None or b.resource_name == self.resource_name)
                and (self.operation is None or b.operation is self.operation)
                and (self.permission is None or b.permission is self.permission))


class Authorizer:
    """Decides (principal, operation, resource) over a fixed ACL set (see the module docstring)."""

    def __init__(self, acls: Iterable[AclBinding], super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_none = allow_everyone_if_no_acl_found
        self._by_type: dict[ResourceType, list[AclBinding]] = {t: [] for t in ResourceType}
        for b in acls:
            self._by_type[b.resource_type].append(b)
        self._memo: dict[tuple[str, Operation, ResourceType, str], bool] = {}

    def authorize(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        key = (principal, operation, resource_type, name)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._decide(principal, operation, resource_type, name)
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[key] = hit
        return hit

    def _decide(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        on_resource = [b for b in self._by_type[resource_type] if b.covers(name)]
        allowed = False
        for b in on_resource:
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.permission is Permission.DENY:
                if b.operation is operation or b.operation is Operation.ALL:
                    return False
            elif (b.operation is operation or b.operation is Operation.ALL
                  or (operation is Operation.DESCRIBE and b.operation in _IMPLIES_DESCRIBE)):
                allowed = True
        if allowed:
            return True
        return self.allow_if_none and not on_resource
