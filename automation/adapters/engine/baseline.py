"""A plan document read as a baseline (`plan --baseline OLD.json`): indexed by stack, each stack parsed only when
the diff asks for it.

A 10,000-cluster plan is about 150 MB of JSON; parsed whole it would take gigabytes and seconds. The plan writes
its document in one layout (automation.cli.plan.JsonDocument: json.dump(indent=2) of the whole, every stack opening
with its name, cluster and plan key), so the index finds each stack's span and key with one scan of the text. A
document in any other layout (re-indented by a tool, say) is parsed whole instead: slower, same answer.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from stacks.errors import InvalidSpec

_STACK = re.compile(r'^    \{\n      "stack": ("(?:[^"\\\n]|\\.)*"),\n      "cluster": ("(?:[^"\\\n]|\\.)*"),\n'
                    r'(?:      "planKey": "([0-9a-f]{64})",\n)?', re.M)
_MESH = '\n  "mesh": '


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    key: str | None


class Baseline:
    """`names` in the document's order; `key(stack)`: the plan key it was planned from (None: planned by a program
    that records none); `planned_from(name, key)`: whether it was planned from that key; `stack(name)`: its JSON
    object; `text(name)`: its text as the document has it; `mesh`."""

    def __init__(self, text: str, source: str = "baseline"):
        self.source = source
        self._text = text
        self._spans: dict[str, _Span] = {}
        self._parsed: dict[str, dict[str, Any]] = {}
        self.mesh: dict[str, Any] = {}
        if not self._index(text):
            self._parse_whole(text)

    @classmethod
    def read(cls, path: str) -> "Baseline":
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as err:
            raise InvalidSpec.one(f"--baseline {path}", "", f"cannot be read: {err}") from None
        return cls(text, source=path)

    def _bad(self, reason: str) -> InvalidSpec:
        return InvalidSpec.one(f"--baseline {self.source}", "", f"not a plan document (`plan --format json`): "
                                                                f"{reason}")

    def _index(self, text: str) -> bool:
        """The fast path; False when the layout is not the plan's own."""
        if not text.startswith('{\n  "stacks": ['):
            return False
        mesh_at = text.rfind(_MESH)
        if mesh_at < 0:
            return False
        starts = list(_STACK.finditer(text, 0, mesh_at))
        for i, match in enumerate(starts):
            end = starts[i + 1].start() - 2 if i + 1 < len(starts) else text.rfind("\n  ],", 0, mesh_at)
            if text[end:end + 2] not in (",\n", "\n "):
                return False
            name = json.loads(match.group(1))
            if name in self._spans:
                raise self._bad(f"stack {name} appears twice")
            self._spans[name] = _Span(match.start(), end, match.group(3))
        if not starts and not text.startswith('{\n  "stacks": [],'):
            return False
        try:
            self.mesh = json.loads(text[mesh_at + len(_MESH):].rstrip().removesuffix("}"))
        except ValueError:
            return False
        return True

    def _parse_whole(self, text: str) -> None:
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise self._bad(str(err)) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("stacks"), list):
            raise self._bad('no "stacks" list')
        self._spans.clear()
        for stack in doc["stacks"]:
            if not isinstance(stack, dict) or not isinstance(stack.get("stack"), str) \
                    or not isinstance(stack.get("resources"), list):
                raise self._bad("a stack without a name or resources")
            if stack["stack"] in self._parsed:
                raise self._bad(f"stack {stack['stack']} appears twice")
            self._parsed[stack["stack"]] = stack
        self.mesh = doc.get("mesh") or {}

    @property
    def names(self) -> list[str]:
        return list(self._spans) if self._spans else list(self._parsed)

    def __contains__(self, name: str) -> bool:
        return name in self._spans or name in self._parsed

    def key(self, name: str) -> str | None:
        if name in self._spans:
            return self._spans[name].key
        found = self._parsed.get(name, {}).get("planKey")
        return found if isinstance(found, str) else None

    def planned_from(self, name: str, key: str | None) -> bool:
        """The baseline has stack `name`, planned from plan key `key`: this plan's stack of that key is the same."""
        return key is not None and name in self and self.key(name) == key

    def text(self, name: str) -> str:
        span = self._spans[name]
        return self._text[span.start:span.end]

    def stack(self, name: str) -> dict[str, Any]:
        if name not in self._parsed:
            try:
                parsed = json.loads(self.text(name))
            except ValueError as err:
                raise self._bad(f"stack {name}: {err}") from None
            if not isinstance(parsed, dict) or parsed.get("stack") != name:
                raise self._bad(f"stack {name}: not where the index found it")
            return parsed  # not kept: a diff reads each stack once
        return self._parsed[name]

    def outputs(self, name: str) -> dict[str, Any]:
        """The stack's outputs alone (what the fleet's next pass reads), without parsing its resources."""
        if name in self._parsed:
            return dict(self._parsed[name].get("outputs") or {})
        text = self.text(name)
        start, end = text.find('\n      "outputs": '), text.find(',\n      "resources": ')
        if start < 0 or end < start:
            return dict(self.stack(name).get("outputs") or {})
        try:
            found = json.loads(text[start + len('\n      "outputs": '):end])
        except ValueError:
            return dict(self.stack(name).get("outputs") or {})
        return found if isinstance(found, dict) else {}
