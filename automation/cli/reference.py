"""`python -m automation reference --write|--check`: the reference pages generated from the model
(stacks/reference.py renders them; this writes them into the checkout, or names the stale ones)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stacks.reference import COMMAND, pages

ROOT = Path(__file__).resolve().parents[2]  # the checkout: docs/reference/ is beside automation/


def stale(root: Path | None = None) -> list[str]:
    """The pages under `root` (default: this checkout) that are missing or are not what the renderer writes."""
    root = ROOT if root is None else root
    return [path for path, text in pages().items()
            if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text]


def reference_command(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else ROOT
    if args.check:
        old = stale(root)
        for path in old:
            print(f"{path} is stale: {COMMAND}", file=sys.stderr)
        return 1 if old else 0
    for path, text in pages().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text)} characters)")
    return 0


def add_reference_command(sub: Any) -> None:
    cmd = sub.add_parser("reference", help="write (or check) the HubConfig and HubCluster reference pages generated "
                                           "from the model (docs/reference/)")
    action = cmd.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write the pages")
    action.add_argument("--check", action="store_true", help="exit 1 naming each page that is stale")
    cmd.add_argument("--root", metavar="DIR", help="the checkout to write into (default: this one)")
    cmd.set_defaults(func=reference_command)
