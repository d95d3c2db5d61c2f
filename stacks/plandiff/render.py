"""The plan diff for people: on a terminal (render_diff, like `pulumi preview --diff`) and as a pull request's
comment (render_markdown).

Both read the diff document {"stacks": [StackDiff.to_json(), ...], "mesh": compare_mesh(...), "summary":
summary(...)} (stacks.plandiff.compare), and the same document gives the same bytes. Values show as compact JSON, a
secret as "[secret]" only (masked again here, whatever the document holds), and every character that does not print
(a control or bidirectional-override character, an escape sequence) as its escape.
"""
from __future__ import annotations

import html
import json
from typing import Any, Iterable, Mapping

from stacks.plandiff.compare import AFTER_APPLY, masked

MARKDOWN_LIMIT = 60_000  # characters: under GitHub's 65,536 for a comment, with room for what a workflow adds
VALUE_LIMIT = 500  # characters of one value in a Markdown cell, then "…" (the terminal shows values whole)
RERUN = "python -m automation plan --baseline ... --format diff"

SIGN = {"add": "+", "remove": "-", "replace": "+-", "update": "~"}
COLOR = {"add": "32", "remove": "31", "update": "33", "replace": "35"}  # green, red, yellow, magenta
TALLY = ("add", "update", "replace", "remove")  # the order counts are shown in: +3 ~1 +-0 -0
STACK_ORDER = ("changed", "new", "removed", "unchanged")
ARROW = " → "


# ---- shared ----------------------------------------------------------------------------------------------------


def _printable(text: str) -> str:
    """`text` with every character that does not print (ANSI escapes, newlines, bidi overrides) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _value(value: Any) -> str:
    """A value as compact one-line JSON, secrets masked; a value known only after apply as those words."""
    if value == AFTER_APPLY:
        return AFTER_APPLY
    return _printable(json.dumps(masked(value), sort_keys=True, ensure_ascii=False, default=str))


def _name(urn: str) -> str:
    """The resource's name: the URN's last part (urn:pulumi:STACK::PROJECT::TYPE::NAME)."""
    parts = urn.split("::", 3)
    return parts[3] if len(parts) == 4 else urn


def _tally(kinds: Mapping[str, int]) -> str:
    return " ".join(f"{SIGN[kind]}{kinds.get(kind, 0):,}" for kind in TALLY)


def _kinds(resources: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {kind: 0 for kind in TALLY}
    for res in resources:
        counts[res["change"]] += 1
    return counts


def _stack_kind(stack: Mapping[str, Any]) -> str:
    """The change kind a stack's header shows: new as add, removed as remove, changed as replace when any of its
    resources is replaced, else update."""
    if stack["change"] == "new":
        return "add"
    if stack["change"] == "removed":
        return "remove"
    return "replace" if any(r["change"] == "replace" for r in stack["resources"]) else "update"


def _changed_groups(doc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(key, group) for key, group in (doc.get("mesh") or {}).items() if group.get("change") != "unchanged"]


def _fields(group: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(field, change.get("old"), change.get("new")) for field, change in group.items()
            if field != "change" and isinstance(change, Mapping)]


def summary_line(doc: Mapping[str, Any]) -> str:
    """"Stacks: 1 changed, 2 new, 0 removed, 9,997 unchanged. Resources: +3 ~1 +-0 -0"."""
    counts = doc["summary"]
    stacks = ", ".join(f"{counts['stacks'].get(change, 0):,} {change}" for change in STACK_ORDER)
    return f"Stacks: {stacks}. Resources: {_tally(counts['resources'])}"


# ---- the terminal ----------------------------------------------------------------------------------------------


def render_diff(doc: Mapping[str, Any], *, color: bool) -> str:
    """Each changed, new or removed stack: a header, then each resource with its sign (+ add, - remove, +- replace,
    ~ update), type and name, and each property `name: old → new` (an added or removed resource: its value). Then
    the mesh groups that changed, how many stacks are unchanged, and the counts. ANSI colours only when `color`."""

    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if color else text

    lines: list[str] = []
    for stack in doc.get("stacks", ()):
        if stack["change"] == "unchanged":
            continue
        resources = stack["resources"]
        header = f"stack {_printable(stack['stack'])}: {stack['change']} ({_tally(_kinds(resources))})"
        lines.append(paint("1;" + COLOR[_stack_kind(stack)], header))
        for res in resources:
            kind = res["change"]
            lines.append("  " + paint(COLOR[kind], f"{SIGN[kind]} {_printable(res['type'])} "
                                                  f"{_printable(_name(res['urn']))}"))
            for prop, change in res["properties"].items():
                lines.append(f"      {_printable(prop)}: {_property(kind, change.get('old'), change.get('new'))}")
        lines.append("")
    for key, group in _changed_groups(doc):
        kind = {"new": "add", "removed": "remove"}.get(group["change"], "update")
        lines.append(paint(COLOR[kind], f"mesh group {_printable(key)}: {group['change']}"))
        for field, old, new in _fields(group):
            lines.append(f"    {_printable(field)}: {_property(kind, old, new)}")
        lines.append("")
    unchanged = doc["summary"]["stacks"].get("unchanged", 0)
    if unchanged:
        lines += [f"{unchanged:,} stack{'' if unchanged == 1 else 's'} unchanged", ""]
    if doc.get("joinOrder"):
        lines += [str(doc["joinOrder"]), ""]
    lines.append(summary_line(doc))
    return "\n".join(lines) + "\n"


def _property(kind: str, old: Any, new: Any) -> str:
    if kind == "add":
        return _value(new)
    if kind == "remove":
        return _value(old)
    return _value(old) + ARROW + _value(new)


# ---- the pull request's comment --------------------------------------------------------------------------------


def render_markdown(doc: Mapping[str, Any], *, limit: int = MARKDOWN_LIMIT, rerun: str = RERUN) -> str:
    """A pull request's comment: a heading, the counts (stacks by change, resources by kind) first, the mesh groups
    that changed, then a collapsible section per changed, new or removed stack (its sign and counts in the summary
    line) with a table of its resources' changes: every changed property of a changed stack's resources, the
    resources alone of a new or removed stack. Once `limit` characters would be passed, the stacks left are
    counted in a last line instead, which names the command (`rerun`) that shows them all."""
    counts = doc["summary"]
    lines = ["## Plan diff", "",
             "| Stacks | " + " | ".join(STACK_ORDER) + " |",
             "|---|" + "---:|" * len(STACK_ORDER),
             "| | " + " | ".join(f"{counts['stacks'].get(c, 0):,}" for c in STACK_ORDER) + " |", "",
             "| Resources | " + " | ".join(f"`{SIGN[kind]}` {kind}" for kind in TALLY) + " |",
             "|---|" + "---:|" * len(TALLY),
             "| | " + " | ".join(f"{counts['resources'].get(kind, 0):,}" for kind in TALLY) + " |"]
    groups = _changed_groups(doc)
    if groups:
        lines += ["", "### Mesh groups", "", "| Group | Change | Field | Old | New |", "|---|---|---|---|---|"]
        for key, group in groups:
            rows = _fields(group) or [("", None, None)]
            for i, (field, old, new) in enumerate(rows):
                first = i == 0
                lines.append(f"| {_cell(key) if first else ''} | {group['change'] if first else ''} | "
                             f"{_cell(field)} | {_code(old, field != '' and group['change'] != 'new')} | "
                             f"{_code(new, field != '' and group['change'] != 'removed')} |")
    if doc.get("joinOrder"):
        lines += ["", f"_{doc['joinOrder'][0].upper()}{doc['joinOrder'][1:]}._"]
    stacks = [stack for stack in doc.get("stacks", ()) if stack["change"] != "unchanged"]
    lines += ["", "### Stacks" if stacks else "No stack changes."]
    out = "\n".join(lines) + "\n"  # every part after this one starts with its blank line
    left = [0] * (len(stacks) + 1)  # left[i]: the resource changes of stacks[i:]
    for i in range(len(stacks) - 1, -1, -1):
        left[i] = left[i + 1] + len(stacks[i]["resources"])
    for i, stack in enumerate(stacks):
        section = _section(stack)
        after = len(stacks) - i - 1
        reserve = len(_tail(after, left[i + 1], rerun)) if after else 0
        if len(out) + len(section) + reserve > limit:
            return out + _tail(len(stacks) - i, left[i], rerun)
        out += section
    return out


def _tail(stacks: int, resources: int, rerun: str) -> str:
    return (f"\n… and {stacks:,} more stack{'' if stacks == 1 else 's'} changed ({resources:,} "
            f"resource{'' if resources == 1 else 's'}); run {_code_text(rerun, cell=False)} for all\n")


def _section(stack: Mapping[str, Any]) -> str:
    """One stack's <details>: its sign, name, change and counts in the summary, a table of its changes inside."""
    resources = stack["resources"]
    sign = SIGN[_stack_kind(stack)]
    head = (f"\n<details><summary><code>{sign}</code> <b>{html.escape(_printable(stack['stack']))}</b>: "
            f"{stack['change']}, {_tally(_kinds(resources))}</summary>\n\n")
    if not resources:
        return head + "No resources.\n\n</details>\n"
    whole = stack["change"] == "changed"  # a new or removed stack: its resources, not every input of each
    rows = ["| | Resource | Type | Property | Old | New |" if whole else "| | Resource | Type |",
            "|---|---|---|---|---|---|" if whole else "|---|---|---|"]
    for res in resources:
        kind = res["change"]
        who = f"| `{SIGN[kind]}` | {_cell(_name(res['urn']))} | {_code_text(res['type'])} |"
        if not whole:
            rows.append(who)
            continue
        props = list(res["properties"].items()) or [("", {})]
        for i, (prop, change) in enumerate(props):
            start = who if i == 0 else "| | | |"
            rows.append(f"{start} {_cell(prop)} | {_code(change.get('old'), bool(prop) and kind != 'add')} | "
                        f"{_code(change.get('new'), bool(prop) and kind != 'remove')} |")
    return head + "\n".join(rows) + "\n\n</details>\n"


def _cell(text: str) -> str:
    """Plain text in a table cell: Markdown's and HTML's special characters escaped, `|` and backticks too."""
    text = _printable(text)
    for char in "\\`*_[]~|#":
        text = text.replace(char, "\\" + char)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: Any, shown: bool = True) -> str:
    """A value in a table cell: compact JSON in a code span (at most VALUE_LIMIT characters); empty when not
    `shown` (the side an added or removed resource does not have)."""
    if not shown:
        return ""
    text = _value(value)
    if len(text) > VALUE_LIMIT:
        text = text[:VALUE_LIMIT] + "…"
    return _code_text(text)


def _code_text(text: str, *, cell: bool = True) -> str:
    """`text` in a code span whose fence is longer than any run of backticks in it; in a table `cell`, `|` escaped
    (a pipe ends the cell even inside a code span; GitHub shows the escaped one as `|`)."""
    text = _printable(text)
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    if cell:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"
