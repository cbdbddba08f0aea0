"""`magnetar-broker token ...`: what `bin/pulsar tokens` does for HS256 / RS256
tokens: make a secret key, make a token for a role."""

from __future__ import annotations

import argparse
import base64
import secrets
import sys
import time
from pathlib import Path

import jwt

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
            args.output.write_bytes(data)
        return 0
    claims: dict[str, object] = {"sub": args.subject}
    if args.expiry_seconds:
        claims["exp"] = int(time.time()) + args.expiry_seconds
    if args.secret_key:
        token = jwt.encode(claims, read_secret_key(args.secret_key), algorithm="HS256")
    else:
        pem = Path(args.private_key.removeprefix("file://")).read_bytes()
        algorithm = "ES256" if b"EC PRIVATE" in pem else "RS256"
        token = jwt.encode(claims, pem, algorithm=algorithm)
    sys.stdout.write(token + "\n")
    return 0
