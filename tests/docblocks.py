"""A doc's command blocks and commands, read from the markdown itself, so a doc edit that breaks one fails a test.

- `blocks(doc, heading)`: the fenced ```sh / ```bash blocks of the section under `heading` (to the next heading of
  its level or above), in order. A block preceded by `<!-- not run: REASON -->` carries that reason and is left
  out of `script`; tests list those reasons, so a block is never dropped silently.
- `script(blocks)`: the runnable blocks as one bash script (variables carry from block to block, as in a terminal).
- `automation_commands(text)`: every `python -m automation ...` command in a text, as argv lists (placeholders
  filled), for the real argparse parser.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$", re.S)
HEADING = re.compile(r"^(#+)\s+(.*?)\s*$", re.M)
COMMAND = "python -m automation"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    text: str
    not_run: str | None  # the reason given in the markdown, when the block is not run

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def section(text: str, heading: str) -> tuple[str, int]:
    """The text under the heading whose title is `heading`, and the line it starts on."""
    for found in HEADING.finditer(text):
        if found[2] == heading:
            level, start = len(found[1]), found.end()
            for after in HEADING.finditer(text, start):
                if len(after[1]) <= level and not _in_fence(text, after.start()):
                    return text[start:after.start()], text.count("\n", 0, start) + 1
            return text[start:], text.count("\n", 0, start) + 1
    raise AssertionError(f"no heading {heading!r}")


def _in_fence(text: str, position: int) -> bool:
    return text.count("\n```", 0, position) % 2 == 1


def blocks(doc: Path, heading: str) -> list[Block]:
    body, first_line = section(doc.read_text(encoding="utf-8"), heading)
    found = []
    for fence in FENCE.finditer(body):
        if fence[1] not in ("sh", "bash"):
            continue
        before = body[:fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NOT_RUN.search(before)
        found.append(Block(doc.name, first_line + body.count("\n", 0, fence.start()), fence[2],
                           reason[1] if reason else None))
    assert found, f"{doc.name}: no command block under {heading!r}"
    return found


def script(chosen: list[Block]) -> str:
    return "\n".join(f"# --- {block}\n{block.text}" for block in chosen if block.not_run is None)


PLACEHOLDER = re.compile(r"<[^<>\n]*>")
DRAWING = "─►◄│└├┘┐┌▲▼"
OPTIONAL = re.compile(r"\[[^\[\]\n]*\]")


def automation_commands(text: str) -> list[tuple[list[str], bool]]:
    """(argv after `python -m automation`, elided) for every command in `text`; `elided` when it says `...` for
    arguments given before. A command ends at a closing backquote, the end of its line (after `\\` continuations)
    or a shell operator."""
    text = text.replace("\\\n", " ")
    commands = []
    for found in re.finditer(re.escape(COMMAND) + r"(?![\w.-])", text):
        if text[found.start() - 1:found.start()] == "`":  # inline code, which may wrap: to its closing backquote
            rest = text[found.end():].split("`", 1)[0].replace("\n", " ")
        else:
            rest = re.split(r"[`\n]", text[found.end():], maxsplit=1)[0]
        rest = OPTIONAL.sub(" ", PLACEHOLDER.sub("PLACEHOLDER", rest))
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argv = []
        for token in lexer:
            if token and set(token) <= set("();<>|&") or set(token) & set(DRAWING):
                break  # a shell operator, or the arrows of a picture
            argv.append(token)
        elided = "..." in argv or "…" in argv
        commands.append(([arg for arg in argv if arg not in ("...", "…")], elided))
    return commands


LINKED = ("automation", "components", "stacks", "policy", "examples", ".venv")


def repository_copy(root: Path, dest: Path, copied: tuple[str, ...] = ()) -> Path:
    """The repository's root as a user has it, for blocks run `from the repository's root` without leaving files
    in this checkout: `copied` files copied (a block may change them), the packages, examples and .venv linked."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in copied:
        (dest / name).write_bytes((root / name).read_bytes())
    for name in LINKED:
        if name not in copied:
            (dest / name).symlink_to(root / name)
    return dest
