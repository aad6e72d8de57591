"""Where a node's cluster secret comes from, and the rules it must meet before the node starts.

The cluster secret keys the HMAC that signs internal traffic (Raft, replica fetch, forwarding) and
the requests of an operator acting as the cluster's super user (`User:__cluster`). Whoever holds
it is every node and the super user, so:

  1. Sources, first that is set wins: the `cluster.secret` key, the file named by
     `cluster.secret.file` (the secret alone, or a properties file with a `cluster.secret=` line,
     as `lakelog up` keeps `DATA_DIR/cluster.properties`), the environment variable
     `LAKELOG_CLUSTER_SECRET`. A file or the environment keeps it off command lines, which any
     local user can read with `ps`.
  2. A secret that was ever published (the built-in default of earlier releases) is refused: anyone
     could sign with it. So is one shorter than 16 bytes.
  3. With `authentication.enabled` or `authorizer.enabled` and no secret: the node refuses to start.
     Security that anyone could bypass with a known key is worse than none; the operator sets one.
  4. Without security and without a secret, a lone node (no other controller voter) makes a random
     one and keeps it in `<log.dirs>/cluster.secret` (mode 0600), reused on every restart; a node of
     a multi-node quorum refuses to start, since the nodes could not share a made-up secret.

Pure apart from reading and writing that file and the environment.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Any, Mapping

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.security.cluster_auth import MIN_SECRET_BYTES

log = logging.getLogger("lakelog.security")

ENV_VAR = "LAKELOG_CLUSTER_SECRET"
#: The file a lone node keeps its own secret in, under log.dirs.
GENERATED_FILE = "cluster.secret"
#: Secrets that were published (built-in defaults of earlier releases): never accepted.
PUBLISHED_SECRETS = frozenset({"lakelog-local-cluster-secret"})
MAX_SECRET_FILE_BYTES = 64 * 1024


def read_secret_file(path: str | os.PathLike) -> str:
    """The secret in `path`: the whole (stripped) text, or the value of its `cluster.secret=` line."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cluster.secret.file {path}: {e.strerror}") from None
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise ConfigError(f"cluster.secret.file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    text = raw.decode("utf-8", "replace").strip()
    for line in text.splitlines():
        if line.strip().startswith("cluster.secret="):
            return line.split("=", 1)[1].strip()
    return text


def check_cluster_secret(secret: str) -> str:
    if secret in PUBLISHED_SECRETS:
        raise ConfigError("cluster.secret is a published default that anyone can sign with; set your own "
                          "(e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)")
    if len(secret.encode()) < MIN_SECRET_BYTES:
        raise ConfigError(f"cluster.secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret


def _other_voters(config: Any) -> bool:
    ids = {v.split("@", 1)[0].strip() for v in config.controller_quorum_voters.split(",") if v.strip()}
    return bool(ids - {str(config.node_id)})


def resolve_cluster_secret(config: Any, environ: Mapping[str, str] | None = None) -> Any:
    """`config` (a NodeConfig) with `cluster.secret` set by the rules above; ConfigError when refused."""
    environ = os.environ if environ is None else environ
    secret = config.cluster_secret
    if not secret and config.cluster_secret_file:
        secret = read_secret_file(config.cluster_secret_file)
        if not secret:
            raise ConfigError(f"cluster.secret.file {config.cluster_secret_file} holds no secret")
    if not secret:
        secret = environ.get(ENV_VAR, "").strip()
    if secret:
        return config.with_overrides({"cluster.secret": check_cluster_secret(secret)})
    if config.authentication_enabled or config.authorizer_enabled:
        raise ConfigError("authentication.enabled / authorizer.enabled need the cluster's own secret: set "
                          f"cluster.secret.file (or cluster.secret, or ${ENV_VAR}) to at least "
                          f"{MIN_SECRET_BYTES} random bytes shared by every node")
    if _other_voters(config):
        raise ConfigError("controller.quorum.voters names other nodes: every node needs the same "
                          f"cluster.secret (set cluster.secret.file, cluster.secret or ${ENV_VAR})")
    return config.with_overrides({"cluster.secret": _own_secret(Path(config.log_dirs))})


def _own_secret(data_dir: Path) -> str:
    from lakelog.logstore.fileutil import fsync_dir

    path = data_dir / GENERATED_FILE
    if path.exists():
        return check_cluster_secret(read_secret_file(path))
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(32)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others, even briefly
    try:
        os.write(fd, (secret + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    log.info("made this node's cluster secret, kept in %s (no cluster.secret was configured)", path)
    return secret
