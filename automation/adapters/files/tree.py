"""A folder of generated files written whole: what a generator writes now, and nothing it wrote before and no
longer writes (the install's manifests, the Helm chart)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable


def write_tree(out: Path, files: dict[str, str], *, ours: Callable[[Path], bool]) -> list[Path]:
    """Write `files` (relative name -> text) under `out`, and remove each file there that is not among them and
    that `ours` says an earlier write made (never a file of someone else's). Returns the paths written, sorted."""
    out.mkdir(parents=True, exist_ok=True)
    folders = {out, *((out / name).parent for name in files)}  # only where this write writes: never a deep walk
    for stale in sorted(p for folder in folders if folder.is_dir() for p in folder.iterdir() if p.is_file()):
        if stale.relative_to(out).as_posix() not in files and ours(stale):
            stale.unlink()
    written = []
    for name, text in sorted(files.items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
