"""Users, API keys and ACLs in the cluster metadata: the state, its records, and how they apply.

`SecurityState` is part of `ClusterImage` (`image.security`), so it is replicated by the metadata
log, applied identically on every node and included in snapshots. It is an immutable value: each
applied record makes a new one with a new `generation`, which the caches of the middleware compare.

Records (JSON, like every metadata record):

    user_credential   name, credential {mechanism, salt, iterations, stored_key, server_key}
                      creates the user or replaces its credential of that mechanism
                      (SCRAM-SHA-256 or SCRAM-SHA-512; a user holds at most one of each)
    delete_user_credential  name, mechanism   removes one credential; the user goes with its last
    delete_user       name                       (its API keys stay until deleted)
    create_api_key    key_id, principal, secret_sha256 (hex)
    delete_api_key    key_id
    create_acls       acls [binding, ...]        bindings already present are ignored
    delete_acls       acls [binding, ...]        bindings absent are ignored
    alter_quota       principal, quotas {key: rate} | null   a principal's quota overrides
                      (`producer.byte.rate`, `consumer.byte.rate`, `request.rate`; 0 = unlimited);
                      null removes them (back to the config's)

A malformed record raises ValueError, which the image turns into a deterministic skip.
`controller_records(op, args, state)` validates an admin request against the state and returns the
records to propose (pure; runs on the active controller).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from lakelog.ingest_api.security.acl import MAX_ACLS, AclBinding, AclFilter, check_principal
from lakelog.ingest_api.security.credentials import SCRAM_SHA_256, ApiKey, ScramCredential
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError, SecurityNotFoundError
from lakelog.ingest_api.security.quotas import QUOTA_KEYS

USER_NAME = re.compile(r"^[a-zA-Z0-9._@-]{1,128}$")
MAX_USERS = 100_000
MAX_API_KEYS = 100_000
MAX_ACLS_PER_REQUEST = 1000
MAX_CREDENTIAL_CHANGES_PER_REQUEST = 1000
_generations = itertools.count(1)


def check_user_name(name: object) -> str:
    if not isinstance(name, str) or not USER_NAME.match(name):
        raise ValueError("a user name is 1 to 128 of ASCII letters, digits, '.', '_', '@' and '-'")
    if name.startswith("__"):  # reserved: User:__cluster is what requests signed with the cluster secret act as
        raise ValueError("user names starting with '__' are reserved")
    return name


@dataclass(frozen=True)
class SecurityState:
    #: user name -> mechanism -> credential (never empty: a user without credentials is deleted).
    users: Mapping[str, Mapping[str, ScramCredential]] = field(default_factory=dict)
    api_keys: Mapping[str, ApiKey] = field(default_factory=dict)
    acls: frozenset[AclBinding] = frozenset()
    quotas: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    generation: int = field(default_factory=lambda: next(_generations), compare=False)

    @property
    def empty(self) -> bool:
        return not (self.users or self.api_keys or self.acls or self.quotas)

    def sorted_acls(self) -> list[AclBinding]:
        return sorted(self.acls, key=AclBinding.sort_key)

    def to_dict(self) -> dict[str, Any]:
        d = {"users": [_user_dict(n, self.users[n]) for n in sorted(self.users)],
             "api_keys": [self.api_keys[k].to_dict() for k in sorted(self.api_keys)],
             "acls": [b.to_dict() for b in self.sorted_acls()]}
        if self.quotas:  # absent while unused, so earlier snapshots keep their bytes
            d["quotas"] = [{"principal": p, "quotas": dict(sorted(self.quotas[p].items()))}
                           for p in sorted(self.quotas)]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "SecurityState":
        if not isinstance(d, dict):
            raise ValueError("security state must be an object")
        users = {check_user_name(u.get("name")): _user_credentials(u) for u in _list(d, "users")}
        keys = {}
        for k in _list(d, "api_keys"):
            key = _api_key(k)
            keys[key.key_id] = key
        acls = frozenset(AclBinding.from_dict(a) for a in _list(d, "acls"))
        quotas = {check_principal(q.get("principal")): check_quotas(q.get("quotas")) for q in _list(d, "quotas")}
        return cls(users, keys, acls, quotas)

    def apply(self, rec: Mapping[str, Any]) -> "SecurityState":
        t = rec.get("type")
        if t == "user_credential":
            if len(self.users) >= MAX_USERS:
                raise ValueError("too many users")
            cred = rec.get("credential")
            if not isinstance(cred, dict):
                raise ValueError("credential must be an object")
            users = dict(self.users)
            name, credential = check_user_name(rec.get("name")), ScramCredential.from_dict(cred)
            users[name] = {**users.get(name, {}), credential.mechanism: credential}
            return SecurityState(users, self.api_keys, self.acls, self.quotas)
        if t == "delete_user_credential":
            name, mechanism = check_user_name(rec.get("name")), rec.get("mechanism")
            if mechanism not in self.users.get(name, {}):
                raise ValueError(f"no {mechanism} credential of user {name!r}")
            users = dict(self.users)
            users[name] = {m: c for m, c in users[name].items() if m != mechanism}
            if not users[name]:
                del users[name]
            return SecurityState(users, self.api_keys, self.acls, self.quotas)
        if t == "delete_user":
            name = check_user_name(rec.get("name"))
            if name not in self.users:
                raise ValueError(f"no user {name!r}")
            users = dict(self.users)
            del users[name]
            return SecurityState(users, self.api_keys, self.acls, self.quotas)
        if t == "create_api_key":
            key = _api_key(rec)
            if key.key_id in self.api_keys or len(self.api_keys) >= MAX_API_KEYS:
                raise ValueError(f"API key {key.key_id} exists, or too many keys")
            keys = dict(self.api_keys)
            keys[key.key_id] = key
            return SecurityState(self.users, keys, self.acls, self.quotas)
        if t == "delete_api_key":
            key_id = rec.get("key_id")
            if key_id not in self.api_keys:
                raise ValueError(f"no API key {key_id!r}")
            keys = dict(self.api_keys)
            del keys[key_id]
            return SecurityState(self.users, keys, self.acls, self.quotas)
        if t in ("create_acls", "delete_acls"):
            bindings = {AclBinding.from_dict(a) for a in _list(rec, "acls")}
            acls = self.acls | bindings if t == "create_acls" else self.acls - bindings
            if len(acls) > MAX_ACLS:
                raise ValueError("too many ACLs")
            return SecurityState(self.users, self.api_keys, frozenset(acls), self.quotas)
        if t == "alter_quota":
            principal = check_principal(rec.get("principal"))
            quotas = dict(self.quotas)
            if rec.get("quotas") is None:
                quotas.pop(principal, None)
            else:
                if len(quotas) >= MAX_USERS and principal not in quotas:
                    raise ValueError("too many quota overrides")
                quotas[principal] = check_quotas(rec.get("quotas"))
            return SecurityState(self.users, self.api_keys, self.acls, quotas)
        raise ValueError(f"not a security record: {t!r}")


RECORD_TYPES = ("user_credential", "delete_user_credential", "delete_user", "create_api_key", "delete_api_key",
                "create_acls", "delete_acls", "alter_quota")


def check_quotas(d: Any) -> dict[str, float]:
    if not isinstance(d, dict) or not d:
        raise ValueError(f"quotas must be a non-empty object of {', '.join(QUOTA_KEYS)} -> rate")
    out = {}
    for k, v in d.items():
        if k not in QUOTA_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 2**53:
            raise ValueError(f"quota {k!r} must be one of {', '.join(QUOTA_KEYS)} with a rate >= 0")
        out[k] = v
    return out


def _user_dict(name: str, creds: Mapping[str, ScramCredential]) -> dict[str, Any]:
    """A user in the snapshot: one SCRAM-SHA-256 credential as `credential` (the form every snapshot
    had before SCRAM-SHA-512), any other set as `credentials`."""
    if list(creds) == [SCRAM_SHA_256]:
        return {"name": name, "credential": creds[SCRAM_SHA_256].to_dict()}
    return {"name": name, "credentials": [creds[m].to_dict() for m in sorted(creds)]}


def _user_credentials(u: Any) -> dict[str, ScramCredential]:
    if not isinstance(u, dict):
        raise ValueError("a user must be an object")
    creds = [ScramCredential.from_dict(c) for c in (_list(u, "credentials") if "credentials" in u
                                                    else [u.get("credential")])]
    out = {c.mechanism: c for c in creds}
    if not out or len(out) != len(creds):
        raise ValueError("a user holds one credential of each of its mechanisms")
    return out


def _list(d: Mapping[str, Any], key: str) -> list:
    v = d.get(key, [])
    if not isinstance(v, list):
        raise ValueError(f"{key} must be a list")
    return v


def _api_key(d: Any) -> ApiKey:
    if not isinstance(d, dict):
        raise ValueError("an API key must be an object")
    key_id, digest = d.get("key_id"), d.get("secret_sha256")
    if not isinstance(key_id, str) or not re.fullmatch(r"[0-9a-f]{16}", key_id):
        raise ValueError("key_id must be 16 hex characters")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError("secret_sha256 must be 64 hex characters")
    principal = check_principal(d.get("principal"))
    if principal.startswith("User:__"):
        raise ValueError("principals starting with 'User:__' are reserved")
    return ApiKey(key_id, principal, bytes.fromhex(digest))


# ------------------------------------------------------------------------- the controller side

CONTROLLER_OPS = ("upsert_user", "alter_user_credentials", "delete_user", "create_api_key", "delete_api_key",
                  "create_acls", "delete_acls", "alter_quota")


def controller_records(op: str, args: Mapping[str, Any], state: SecurityState) -> tuple[list[dict], dict]:
    """(records to propose, result) for a security admin request; raises a SecurityError when refused."""
    try:
        if op == "upsert_user":  # {"name", "credential"} or {"name", "credentials": [...]}: one per mechanism
            name = check_user_name(args.get("name"))
            creds = [ScramCredential.from_dict(c) for c in (_list(args, "credentials") if "credentials" in args
                                                            else [args.get("credential")])]
            if not creds or len({c.mechanism for c in creds}) != len(creds):
                raise ValueError("one credential of each mechanism")
            return [{"type": "user_credential", "name": name, "credential": c.to_dict()} for c in creds], {}
        if op == "alter_user_credentials":
            return _alter_user_credentials(args, state), {}
        if op == "delete_user":
            name = check_user_name(args.get("name"))
            if name not in state.users:
                raise SecurityNotFoundError(f"User {name} not found.")
            return [{"type": "delete_user", "name": name}], {}
        if op == "create_api_key":
            key = _api_key(dict(args))
            return [{"type": "create_api_key", **key.to_dict()}], {}
        if op == "delete_api_key":
            key_id = args.get("key_id")
            if key_id not in state.api_keys:
                raise SecurityNotFoundError(f"API key {key_id} not found.")
            return [{"type": "delete_api_key", "key_id": key_id}], {}
        if op == "create_acls":
            acls = _list(args, "acls")
            if not 1 <= len(acls) <= MAX_ACLS_PER_REQUEST:
                raise ValueError(f"between 1 and {MAX_ACLS_PER_REQUEST} ACLs per request")
            bindings = [AclBinding.from_dict(a) for a in acls]
            if len(state.acls | set(bindings)) > MAX_ACLS:
                raise ValueError(f"the cluster may hold at most {MAX_ACLS} ACLs")
            return [{"type": "create_acls", "acls": [b.to_dict() for b in bindings]}], {}
        if op == "delete_acls":  # {"filter": {...}} or {"acls": [binding, ...]} (those present are deleted)
            if "acls" in args:
                exact = {AclBinding.from_dict(a) for a in _list(args, "acls")}
                doomed = [b for b in state.sorted_acls() if b in exact]
            else:
                flt = AclFilter.from_params(dict(args.get("filter") or {}))
                doomed = [b for b in state.sorted_acls() if flt.matches(b)]
            records = [{"type": "delete_acls", "acls": [b.to_dict() for b in doomed]}] if doomed else []
            return records, {"deleted": [b.to_dict() for b in doomed]}
        if op == "alter_quota":
            principal = check_principal(args.get("principal"))
            quotas = args.get("quotas")
            if quotas is None and principal not in state.quotas:
                raise SecurityNotFoundError(f"No quotas for {principal}.")
            return [{"type": "alter_quota", "principal": principal,
                     "quotas": None if quotas is None else check_quotas(quotas)}], {}
    except (ValueError, TypeError, KeyError) as e:
        raise InvalidSecurityRequestError(str(e)) from None
    raise InvalidSecurityRequestError(f"unknown security request {op!r}")


def _alter_user_credentials(args: Mapping[str, Any], state: SecurityState) -> list[dict]:
    """Records for {"deletions": [{"name", "mechanism"}], "upsertions": [{"name", "credential"}]}
    (Kafka's AlterUserScramCredentials): deletions first, each of a credential that exists."""
    deletions, upsertions = _list(args, "deletions"), _list(args, "upsertions")
    if not 1 <= len(deletions) + len(upsertions) <= MAX_CREDENTIAL_CHANGES_PER_REQUEST:
        raise ValueError(f"between 1 and {MAX_CREDENTIAL_CHANGES_PER_REQUEST} credential changes per request")
    records: list[dict] = []
    for d in deletions:
        name, mechanism = check_user_name(d.get("name")), d.get("mechanism")
        if mechanism not in state.users.get(name, {}):
            raise SecurityNotFoundError(f"User {name} has no {mechanism} credential.")
        records.append({"type": "delete_user_credential", "name": name, "mechanism": mechanism})
    for u in upsertions:
        cred = ScramCredential.from_dict(u.get("credential"))
        records.append({"type": "user_credential", "name": check_user_name(u.get("name")),
                        "credential": cred.to_dict()})
    return records
