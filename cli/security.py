"""Console tools for users, API keys and ACLs, over the node's v3 HTTP API (like kafka-configs.sh
--alter --add-config SCRAM-SHA-256 and kafka-acls.sh):

    lakelog users add NAME [--new-password P]    (else $LAKELOG_NEW_PASSWORD, else a prompt)
    lakelog users list
    lakelog users remove NAME
    lakelog api-keys create --principal User:NAME   prints the key once
    lakelog api-keys list
    lakelog api-keys remove KEY_ID
    lakelog acls add (--allow-principal P | --deny-principal P) --operation OP [--operation OP ...]
                     (--topic T | --group G | --transactional-id ID | --cluster)
                     [--resource-pattern-type literal|prefixed]
    lakelog acls list   [--principal P] [--topic T | --group G | --transactional-id ID | --cluster]
                        [--resource-pattern-type ...]
    lakelog acls remove [the same filters; at least one]
    lakelog quotas set User:NAME [--producer-byte-rate N] [--consumer-byte-rate N] [--request-rate N]
    lakelog quotas list
    lakelog quotas remove User:NAME

Every command needs credentials allowed to ALTER (or DESCRIBE, to list) the cluster: a super user,
or `--cluster-secret-file` to bootstrap the first users and ACLs of a new cluster.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
from typing import Any
from urllib.parse import quote

OPERATIONS = ("read", "write", "create", "delete", "alter", "describe", "all")


def _base(client) -> str:
    return f"/v3/clusters/{quote(client.cluster_id, safe='')}"


def _cmd_users_add(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    password = args.new_password or os.environ.get("LAKELOG_NEW_PASSWORD")
    if not password:
        password = getpass.getpass(f"password for {args.name}: ")
    with client_from_args(args) as client:
        client._request("POST", f"{_base(client)}/users", json={"name": args.name, "password": password},
                        expect=(201,))
    print(f"user {args.name} saved (SCRAM-SHA-256)")
    return 0


def _cmd_users_list(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        for u in client._json("GET", f"{_base(client)}/users").get("data", []):
            print(f"{u['name']}\t" + "\t".join(f"{c['mechanism']} iterations={c['iterations']}"
                                                 for c in u.get("credentials", [])))
    return 0


def _cmd_users_remove(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        client._request("DELETE", f"{_base(client)}/users/{quote(args.name, safe='')}", expect=(204,))
    print(f"user {args.name} removed")
    return 0


def _cmd_keys_create(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        doc = client._json("POST", f"{_base(client)}/api-keys", json={"principal": args.principal}, expect=(201,))
    print(doc["api_key"])
    return 0


def _cmd_keys_list(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        for k in client._json("GET", f"{_base(client)}/api-keys").get("data", []):
            print(f"{k['key_id']}\t{k['principal']}")
    return 0


def _cmd_keys_remove(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        client._request("DELETE", f"{_base(client)}/api-keys/{quote(args.key_id, safe='')}", expect=(204,))
    print(f"API key {args.key_id} removed")
    return 0


def _resource(args: argparse.Namespace) -> dict[str, str]:
    if args.topic is not None:
        return {"resource_type": "TOPIC", "resource_name": args.topic}
    if args.group is not None:
        return {"resource_type": "GROUP", "resource_name": args.group}
    if args.transactional_id is not None:
        return {"resource_type": "TRANSACTIONAL_ID", "resource_name": args.transactional_id}
    if args.cluster:
        return {"resource_type": "CLUSTER", "resource_name": "kafka-cluster"}
    return {}


def _cmd_acls_add(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args
    from lakelog.client.node_client import ClientError

    resource = _resource(args)
    if not resource:
        raise ClientError("name the resource: --topic T, --group G, --transactional-id ID or --cluster")
    principal, permission = (args.allow_principal, "ALLOW") if args.allow_principal else (args.deny_principal, "DENY")
    with client_from_args(args) as client:
        for op in args.operation:
            acl = {**resource, "pattern_type": args.resource_pattern_type.upper(), "principal": principal,
                   "host": "*", "operation": op.upper(), "permission": permission}
            client._request("POST", f"{_base(client)}/acls", json=acl, expect=(201,))
            print(_render(acl))
    return 0


def _filter(args: argparse.Namespace) -> dict[str, str]:
    params = dict(_resource(args))
    if args.principal:
        params["principal"] = args.principal
    if args.resource_pattern_type:
        params["pattern_type"] = args.resource_pattern_type.upper()
    return params


def _render(acl: dict[str, Any]) -> str:
    return (f"{acl['principal']} {acl['permission']} {acl['operation']} on {acl['resource_type']} "
            f"{acl['pattern_type']} {acl['resource_name']!r}")


def _cmd_acls_list(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        for acl in client._json("GET", f"{_base(client)}/acls", params=_filter(args)).get("data", []):
            print(_render(acl))
    return 0


def _cmd_acls_remove(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args
    from lakelog.client.node_client import ClientError

    params = _filter(args)
    if not params:
        raise ClientError("give at least one filter (--principal, --topic, --group, --transactional-id, --cluster, "
                          "--resource-pattern-type)")
    with client_from_args(args) as client:
        deleted = client._json("DELETE", f"{_base(client)}/acls", params=params).get("data", [])
    for acl in deleted:
        print(f"removed {_render(acl)}")
    return 0


def _cmd_quotas_set(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args
    from lakelog.client.node_client import ClientError

    quotas = {k: v for k, v in (("producer.byte.rate", args.producer_byte_rate),
                                ("consumer.byte.rate", args.consumer_byte_rate),
                                ("request.rate", args.request_rate)) if v is not None}
    if not quotas:
        raise ClientError("give at least one of --producer-byte-rate, --consumer-byte-rate, --request-rate")
    with client_from_args(args) as client:
        doc = client._json("PUT", f"{_base(client)}/quotas/{quote(args.principal, safe=':')}", json=quotas)
    print(f"{doc['principal']}\t{json.dumps(doc['quotas'], sort_keys=True)}")
    return 0


def _cmd_quotas_list(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        for q in client._json("GET", f"{_base(client)}/quotas").get("data", []):
            print(f"{q['principal']}\t{json.dumps(q['quotas'], sort_keys=True)}")
    return 0


def _cmd_quotas_remove(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        client._request("DELETE", f"{_base(client)}/quotas/{quote(args.principal, safe=':')}", expect=(204,))
    print(f"quotas of {args.principal} removed")
    return 0


def _resource_args(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--topic", metavar="T", help="a topic (or a prefix, or '*')")
    which.add_argument("--group", metavar="G", help="a consumer group (or a prefix, or '*')")
    which.add_argument("--transactional-id", metavar="ID",
                       help="a producer's transactional.id (or a prefix, or '*')")
    which.add_argument("--cluster", action="store_true", help="the cluster")


def add_commands(sub: Any, add: Any, client_opts: argparse.ArgumentParser) -> None:
    users = sub.add_parser("users", help="add, list and remove users (SCRAM-SHA-256 and -512 credentials)")
    usub = users.add_subparsers(dest="users_command", required=True)
    p = add(usub, "add", "users add", _cmd_users_add, parents=[client_opts], help="create a user or change its password",
            description="Create a user or change its password. The user's password is --new-password P, else "
                        "$LAKELOG_NEW_PASSWORD, else a prompt; --user/--password are the caller's own credentials.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--new-password", metavar="P", help="the new password (else $LAKELOG_NEW_PASSWORD, else a prompt)")
    add(usub, "list", "users list", _cmd_users_list, parents=[client_opts], help="list users")
    p = add(usub, "remove", "users remove", _cmd_users_remove, parents=[client_opts], help="remove a user")
    p.add_argument("name", metavar="NAME")

    keys = sub.add_parser("api-keys", help="create, list and remove API keys (Bearer tokens)")
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    p = add(ksub, "create", "api-keys create", _cmd_keys_create, parents=[client_opts],
            help="create a key for a principal; the key is printed once")
    p.add_argument("--principal", required=True, metavar="User:NAME")
    add(ksub, "list", "api-keys list", _cmd_keys_list, parents=[client_opts], help="list key ids and principals")
    p = add(ksub, "remove", "api-keys remove", _cmd_keys_remove, parents=[client_opts], help="revoke a key")
    p.add_argument("key_id", metavar="KEY_ID")

    acls = sub.add_parser("acls", help="add, list and remove ACLs (like kafka-acls.sh)")
    asub = acls.add_subparsers(dest="acls_command", required=True)
    p = add(asub, "add", "acls add", _cmd_acls_add, parents=[client_opts], help="add ACLs")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--allow-principal", metavar="User:NAME")
    who.add_argument("--deny-principal", metavar="User:NAME")
    p.add_argument("--operation", action="append", required=True, choices=OPERATIONS, type=str.lower)
    p.add_argument("--resource-pattern-type", choices=("literal", "prefixed"), default="literal", type=str.lower)
    _resource_args(p)
    for name, func, text in (("list", _cmd_acls_list, "list ACLs matching the filters"),
                             ("remove", _cmd_acls_remove, "remove the ACLs matching the filters")):
        p = add(asub, name, f"acls {name}", func, parents=[client_opts], help=text)
        p.add_argument("--principal", metavar="User:NAME")
        p.add_argument("--resource-pattern-type", choices=("literal", "prefixed"), type=str.lower)
        _resource_args(p)

    quotas = sub.add_parser("quotas", help="set, list and remove per-principal quotas (like kafka-configs.sh --entity-type users)")
    qsub = quotas.add_subparsers(dest="quotas_command", required=True)
    p = add(qsub, "set", "quotas set", _cmd_quotas_set, parents=[client_opts],
            help="set a principal's quota overrides (0 = unlimited; others keep their value)")
    p.add_argument("principal", metavar="User:NAME")
    p.add_argument("--producer-byte-rate", type=float, metavar="BYTES_PER_S")
    p.add_argument("--consumer-byte-rate", type=float, metavar="BYTES_PER_S")
    p.add_argument("--request-rate", type=float, metavar="PER_S")
    add(qsub, "list", "quotas list", _cmd_quotas_list, parents=[client_opts], help="list quota overrides")
    p = add(qsub, "remove", "quotas remove", _cmd_quotas_remove, parents=[client_opts],
            help="remove a principal's overrides (back to the node config's quotas)")
    p.add_argument("principal", metavar="User:NAME")
