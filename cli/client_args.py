"""The CLI's global client options (`--bootstrap-server`, credentials, TLS files, the cluster secret
file) turned into the Python client's settings (`client/node_client.py`)."""

from __future__ import annotations

import argparse
import dataclasses

from lakelog.client.node_client import ClientError, ClientSecurity, LakelogClient


def client_from_args(args: argparse.Namespace) -> "LakelogClient":
    """The client the CLI's global options describe (bootstrap server, credentials, TLS)."""
    return LakelogClient(args.bootstrap_server, security=security_from_args(args))


def security_from_args(args: argparse.Namespace) -> ClientSecurity:
    """Credentials and TLS files from the CLI's global options and the environment."""
    security = ClientSecurity.from_env(user=getattr(args, "user", None), password=getattr(args, "password", None),
                                       api_key=getattr(args, "api_key", None), ca_cert=getattr(args, "ca_cert", None),
                                       client_cert=getattr(args, "client_cert", None),
                                       client_key=getattr(args, "client_key", None))
    if getattr(args, "cluster_secret_file", None):
        try:
            with open(args.cluster_secret_file, encoding="utf-8") as f:
                secret = f.read().strip()
            # `lakelog up` keeps it as a properties file (DATA_DIR/cluster.properties): take that line.
            for line in secret.splitlines():
                if line.strip().startswith("cluster.secret="):
                    secret = line.split("=", 1)[1].strip()
        except OSError as e:
            raise ClientError(f"cannot read {args.cluster_secret_file}: {e.strerror}") from None
        security = dataclasses.replace(security, cluster_secret=secret)
    return security
