"""What the Dockerfile puts in the image: its base, WORKDIR, the files it COPYs (and where), ENV, USER, ENTRYPOINT,
its build arguments, labels and RUN commands.

Just enough of the Dockerfile grammar for this repository's file (continuation lines, comments, COPY flags,
the JSON form, `ENV k=v ...` and `ENV k v`, `ARG k[=v]` before and after FROM, `LABEL k=v ...`), read from the
last stage; anything else is ignored.
"""
from __future__ import annotations

import json
import posixpath
import re
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
    base: str = ""  # FROM, build arguments declared before it expanded to their defaults
    args: dict[str, str] = field(default_factory=dict)  # the stage's build arguments and their defaults
    labels: dict[str, str] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)  # each RUN's shell command, continuation lines joined

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


def _pairs(rest: str) -> dict[str, str]:
    words = shlex.split(rest)
    if "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.partition("=")[::2] for word in words)


def _env(image: Image, rest: str) -> None:
    image.env.update(_pairs(rest))


def parse(text: str) -> Image:
    image = Image()
    before_from: dict[str, str] = {}  # ARGs before the first FROM: usable in FROM, and by a stage that redeclares
    seen_from = False
    for word, rest in instructions(text):
        if word == "ARG":
            name, has_default, default = rest.partition("=")
            value = shlex.split(default)[0] if has_default and shlex.split(default) else ""
            if not seen_from:
                before_from[name] = value
            else:
                image.args[name] = value if has_default else before_from.get(name, "")
        elif word == "FROM":
            seen_from = True
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: before_from.get(m[1] or m[2], ""), rest.split()[0])
            image = Image(base=base)  # only the last stage ends up in the image
        elif word == "LABEL":
            image.labels.update(_pairs(rest))
        elif word == "RUN":
            image.runs.append(rest)
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


# --------------------------------------------------------------------------- downloads and their checks

SEPARATORS = ("&&", "||", ";", "|", "&")
FETCHERS = ("curl", "wget")
ARG_REF = re.compile(r"^\$\{(\w+)\}$|^\$(\w+)$")


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    after: str  # the separator before it ("" first): "|" means its stdin is the previous command's output


def commands(run: str) -> list[Command]:
    """A RUN's simple commands in order, with the operator before each (shell grammar enough for `a && b | c`,
    `{ ...; }` groups and redirections; words keep their `${...}`, unexpanded)."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    out: list[Command] = []
    words: list[str] = []
    after = ""
    for token in [*lexer, ";"]:
        if token in SEPARATORS:
            if words:
                out.append(Command(tuple(words), after))
            words, after = [], token
        elif token not in ("{", "}"):
            words.append(token)
    return out


@dataclass(frozen=True)
class Download:
    url: str
    file: str | None  # where it is written (None: to stdout, e.g. piped into a shell)
    checked_by: str | None  # the build argument its SHA-256 is checked against (sha256sum -c) before any other use


def _output(words: tuple[str, ...]) -> str | None:
    for i, word in enumerate(words[1:-1], 1):
        if word in ("-o", "-O", "--output", "--output-document") or re.fullmatch(r"-[a-zA-Z]*[oO]", word):
            return words[i + 1]
        if word.startswith(("--output=", "--output-document=")):
            return word.partition("=")[2]
    return None


def downloads(run: str) -> list[Download]:
    """Every curl/wget of a RUN, where it writes, and whether the file is checked against a build argument's
    SHA-256 (`echo "${ARG}  file" | sha256sum -c -`) before any other command uses it."""
    cmds = commands(run)
    found = []
    for i, cmd in enumerate(cmds):
        if cmd.words[0] not in FETCHERS:
            continue
        url = next((w for w in cmd.words if w.startswith(("https://", "http://"))), "")
        file = _output(cmd.words)
        checked_by = None
        piped = i + 1 < len(cmds) and cmds[i + 1].after == "|"
        if file and not piped:
            for j, later in enumerate(cmds[i + 1:], i + 1):
                if not any(file in word.split() or word == file for word in later.words):
                    continue
                sums = j + 1 < len(cmds) and cmds[j + 1].after == "|" and cmds[j + 1].words == ("sha256sum", "-c", "-")
                line = later.words[1].split() if later.words[0] == "echo" and len(later.words) == 2 else []
                ref = ARG_REF.match(line[0]) if len(line) == 2 and line[1] == file else None
                checked_by = (ref[1] or ref[2]) if sums and ref else None
                break  # the first use decides
        found.append(Download(url, None if piped else file, checked_by))
    return found


def guard_step(run: str, arg: str) -> str:
    """The shell group that ends the RUN early, successfully and saying so, when `arg` is empty (an optional input
    left out: nothing is downloaded), run as written by the tests."""
    found = re.search(r"\{ test -n \"\$\{%s\}\" \|\| \{.*?; \}; \}" % re.escape(arg), run)
    if found is None:
        raise AssertionError(f"no guard on an empty ${{{arg}}} in: {run}")
    return found[0]


def check_step(run: str, arg: str) -> str:
    """The shell text that checks a file against `arg` (`echo "${ARG}  file" | sha256sum -c -`): run as written."""
    found = re.search(r"echo \"\$\{%s\}  [^\"]+\" \| sha256sum -c -" % re.escape(arg), run)
    if found is None:
        raise AssertionError(f"no sha256sum check of ${{{arg}}} in: {run}")
    return found[0]
