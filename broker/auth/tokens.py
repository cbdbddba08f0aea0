"""`magnetar token ...` (also `magnetar-broker token ...`): what `bin/pulsar
tokens` does for HS256 / RS256 / ES256 tokens: make a secret key, make a
token for a role."""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from magnetar.broker.auth.authentication import read_secret_key


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = commands.add_parser("token", help="create secret keys and tokens")
    actions = token.add_subparsers(dest="token_command", required=True)
    key = actions.add_parser("create-secret-key", help="a random HS256 secret key")
    key.add_argument("--output", type=Path, help="file to write (default: stdout)")
    key.add_argument("--base64", action="store_true", help="write it base64-encoded")
    create = actions.add_parser("create", help="a token whose subject is the role")
    create.add_argument("--subject", required=True, help="the role the token names")
    signing = create.add_mutually_exclusive_group(required=True)
    signing.add_argument("--secret-key", help="file with the HS256 secret key")
    signing.add_argument("--private-key", help="PEM file with an RSA or EC private key")
    create.add_argument("--expiry-seconds", type=int, help="valid this long (default: forever)")


def run(args: argparse.Namespace) -> int:
    if args.token_command == "create-secret-key":
        key = secrets.token_bytes(32)
        data = base64.b64encode(key) if args.base64 else key
        if args.output is None:
            sys.stdout.write(base64.b64encode(key).decode() + "\n")
        else:
            # A signing key: readable by its owner only, from the first byte.
            fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        return 0
    claims: dict[str, object] = {"sub": args.subject}
    if args.expiry_seconds:
        claims["exp"] = int(time.time()) + args.expiry_seconds
    if args.secret_key:
        token = jwt.encode(claims, read_secret_key(args.secret_key), algorithm="HS256")
    else:
        pem = Path(args.private_key.removeprefix("file://")).read_bytes()
        # By key type, not PEM label: PKCS#8 files say only "PRIVATE KEY".
        private = serialization.load_pem_private_key(pem, password=None)
        algorithm = "ES256" if isinstance(private, ec.EllipticCurvePrivateKey) else "RS256"
        token = jwt.encode(claims, pem, algorithm=algorithm)
    sys.stdout.write(token + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The `magnetar` console script: `magnetar token create-secret-key`,
    `magnetar token create --subject ROLE ...`."""
    parser = argparse.ArgumentParser(prog="magnetar", description="Magnetar tools.")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
