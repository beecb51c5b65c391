"""Owns ``streamflow payload-keys``: the key file of the payload codec (``--payload-codec``).
``new`` writes a file with one fresh active key; ``rotate`` adds a fresh key and makes it active
(what it held still opens what it sealed); ``retire`` removes a key that is no longer active;
``list`` shows the ids, the active one marked. Key material is never printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamflow.payloads import PayloadKeyError, PayloadKeys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow payload-keys`` to the command line."""
    keys = subparsers.add_parser(
        "payload-keys", help="create, rotate, retire and list payload encryption keys"
    )
    actions = keys.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="write a key file with one fresh, active key")
    new.add_argument("id", help="the key's id (recorded with every payload it seals)")
    rotate = actions.add_parser("rotate", help="add a fresh key and make it the active one")
    rotate.add_argument("id", help="the new key's id")
    retire = actions.add_parser("retire", help="remove a key that is no longer active")
    retire.add_argument("id")
    listing = actions.add_parser("list", help="the keys' ids; the active one is marked")
    for parser in (new, rotate, retire, listing):
        parser.add_argument("file", type=Path, help="the key file (--payload-codec)")


def run(args: argparse.Namespace) -> int:
    """Run ``streamflow payload-keys``; the exit status (2 for a file or id it cannot use)."""
    try:
        if args.action == "new":
            if args.file.exists():
                raise PayloadKeyError(f"{args.file} exists: rotate its keys instead")
            PayloadKeys.generate(args.id).save(args.file)
            print(f"wrote {args.file} with active key {args.id}", file=sys.stderr)
        elif args.action == "rotate":
            PayloadKeys.load(args.file).rotated(args.id).save(args.file)
            print(f"{args.id} is now the active key of {args.file}", file=sys.stderr)
        elif args.action == "retire":
            PayloadKeys.load(args.file).without(args.id).save(args.file)
            print(f"retired {args.id} from {args.file}", file=sys.stderr)
        else:
            keys = PayloadKeys.load(args.file)
            for key_id in sorted(keys.keys):
                print(f"{key_id}\t{'active' if key_id == keys.active else ''}".rstrip())
    except (OSError, PayloadKeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
