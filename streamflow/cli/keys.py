"""Owns ``streamflow keys``: the API keys of a keys file (``serve --keys-file``), each with a
name and a role (``read``, ``operate``, ``admin``). ``add`` prints a new key once (the file
keeps only its SHA-256 digest); ``list`` shows names and roles; ``remove`` revokes one. A
server that reads the file sees the change within a second, without a restart."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamflow.api.keys import Role, add_key, read_keys, remove_key


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow keys`` to the command line."""
    keys = subparsers.add_parser("keys", help="add, list and remove API keys with roles")
    actions = keys.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a key with a role; prints the key once")
    add.add_argument("name", help="who the key is for (letters, digits, . _ @ -)")
    add.add_argument(
        "--role", required=True, choices=[r.value for r in Role], help="what the key may do"
    )
    listing = actions.add_parser("list", help="the keys' names and roles")
    remove = actions.add_parser("remove", help="revoke a key")
    remove.add_argument("name")
    for parser in (add, listing, remove):
        parser.add_argument(
            "--file", type=Path, required=True, help="the keys file (serve --keys-file)"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``streamflow keys``; the exit status (2 for a file or name it cannot use)."""
    try:
        if args.action == "add":
            key = add_key(args.file, args.name, Role(args.role))
            print(key)
            print(
                f"added {args.name} ({args.role}) to {args.file}; the key above is shown once",
                file=sys.stderr,
            )
        elif args.action == "list":
            for entry in read_keys(args.file):
                print(f"{entry.principal.name}\t{entry.principal.role.value}")
        else:
            remove_key(args.file, args.name)
            print(f"removed {args.name} from {args.file}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
