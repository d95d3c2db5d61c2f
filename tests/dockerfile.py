"""What the Dockerfile puts in the image: its WORKDIR, the files it COPYs (and where), ENV, USER and ENTRYPOINT.

Just enough of the Dockerfile grammar for this repository's file (continuation lines, comments, COPY flags,
the JSON form, `ENV k=v ...` and `ENV k v`), read from the last stage; anything else is ignored.
"""
from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parent.parent / "Dockerfile"


@dataclass
class Image:
    workdir: str = "/"
    copies: list[tuple[str, str]] = field(default_factory=list)  # (path in the build context, path in the image)
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    entrypoint: list[str] = field(default_factory=list)  # a pod's `args` run after it (`command` replaces it)

    def copied_to(self, path: str) -> str | None:
        """The build-context source that lands at `path` in the image, if any."""
        return next((src for src, dest in self.copies if dest == path), None)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _copy(image: Image, rest: str) -> None:
    words = json.loads(rest) if rest.startswith("[") else [w for w in shlex.split(rest) if not w.startswith("--")]
    *sources, dest = words
    dest = posixpath.join(image.workdir, dest)
    into_dir = len(sources) > 1 or words[-1].endswith("/") or words[-1] in (".", "./")
    for src in sources:
        target = posixpath.join(dest, posixpath.basename(src.rstrip("/"))) if into_dir else dest
        image.copies.append((src.rstrip("/"), posixpath.normpath(target)))


def _env(image: Image, rest: str) -> None:
    words = shlex.split(rest)
    if "=" not in words[0]:
        image.env[words[0]] = " ".join(words[1:])
        return
    for word in words:
        key, _, value = word.partition("=")
        image.env[key] = value


def parse(text: str) -> Image:
    image = Image()
    for word, rest in instructions(text):
        if word == "FROM":
            image = Image()  # only the last stage ends up in the image
        elif word == "WORKDIR":
            image.workdir = posixpath.normpath(posixpath.join(image.workdir, rest))
        elif word in ("COPY", "ADD"):
            _copy(image, rest)
        elif word == "ENV":
            _env(image, rest)
        elif word == "USER":
            image.user = rest
        elif word == "ENTRYPOINT":
            image.entrypoint = json.loads(rest) if rest.startswith("[") else ["/bin/sh", "-c", rest]
    return image


def image() -> Image:
    return parse(DOCKERFILE.read_text())
