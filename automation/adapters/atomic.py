"""A file written whole or not at all: a reader (HAProxy reloading, another plan reading the cache) sees the old
file or the new one, never a part of either.

The new content goes to a temporary file beside `path` (the same file system, so the rename is atomic), which then
replaces `path`; if writing fails, the temporary file is removed and the error raised.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Any, Iterator


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], binary: bool = False) -> Iterator[IO[Any]]:
    """A file opened for writing that takes `path`'s place when the block ends (removed if the block raises)."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.")
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    with replacing(path) as fh:
        fh.write(text)
