"""The Helm chart: the install's rendered manifests with the documented values put back as template actions. Pure.

There is one source of the install's manifests, the components that `install --render` and `pulumi up` of deploy/
run (stacks.deployment's values). The chart is not a third source written by hand: `install --chart DIR`
(automation.adapters.files.chart) renders the install again and again, with marked values, and this module turns
what it sees into templates:

- **Values** (`VALUES`): each documented key is rendered with a marker value; every place the marker shows up is
  replaced by the key's action (`{{ .Values.service.workers }}`, `| quote` where the marker is a whole scalar,
  `toYaml` for a map). Two renders with different markers must give the same template, so a value the components
  derive instead of copying (or a marker that collides with other text) fails the build, naming the object.
- **Switches** (`SWITCHES`): a value that changes which objects exist or their shape (the registry off, the console
  on, runners, a remote backend ...). An object is rendered under every combination of the switches that touch it,
  and each distinct text is one branch of an `{{- if }}`.

Every leaf key of stacks.deployment.InstallValues is a value or a switch (or both): `unplaced_keys()` names one that
is neither, and the generator refuses to write a chart then.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

MARK = "zzhwv"  # every marker value contains it; none may be left in a template
# Helm never upgrades a chart's crds/ folder: the CRDs are templates, kept on uninstall (docs/install.md).
CRD_KEEP = {"helm.sh/resource-policy": "keep"}


@dataclass(frozen=True)
class Switch:
    """A value that changes the objects' shape: `on` (dotted keys) turns it on; `test` is its template test."""
    name: str
    test: str
    on: Mapping[str, Any]
    needs: tuple[str, ...] = ()  # switches that must be on with this one


@dataclass(frozen=True)
class Value:
    """A documented key put back into the templates. kind: how its marker looks and is put back (marker(),
    template_values()): str, enum, int, quantity, resources, map, list, image, arn, url."""
    key: str
    kind: str
    map_key: str = ""  # a map's marker key, where the model allows only some keys
    low: int = 0  # an int's range (the model's), for markers that fit it
    high: int = 0


SWITCHES: tuple[Switch, ...] = (
    Switch("registryOff", "not .Values.registry.enabled", {"registry.enabled": False}),
    Switch("monitoring", ".Values.monitoring.enabled", {"monitoring.enabled": True}),
    Switch("monitoringLabels", ".Values.monitoring.labels", {"monitoring.labels": "map"}),
    Switch("backendUrl", ".Values.backend.url", {"backend.url": "url"}),
    Switch("runners", 'eq .Values.service.executor "runners"', {"service.executor": "runners"},
           needs=("backendUrl",)),
    Switch("secretData", ".Values.backend.secret.data", {"backend.secret.data": "map"}),
    Switch("roleArn", ".Values.serviceAccount.roleArn", {"serviceAccount.roleArn": "arn"}),
    Switch("annotations", ".Values.serviceAccount.annotations", {"serviceAccount.annotations": "map"}),
    Switch("publicUrl", ".Values.registry.publicUrl", {"registry.publicUrl": "url"}),
    Switch("factsDb", ".Values.registry.factsDbSecret", {"registry.factsDbSecret": "str"}),
    Switch("console", ".Values.console.enabled", {"console.enabled": True}),
    Switch("secureCookies", ".Values.console.secureCookies", {"console.secureCookies": True}),
)

VALUES: tuple[Value, ...] = (
    Value("image", "image"),
    Value("namespace", "str"),
    Value("serviceAccount.roleArn", "arn"),
    Value("serviceAccount.annotations", "map"),
    Value("backend.url", "url"),
    Value("backend.secret.name", "str"),
    Value("backend.secret.data", "map", map_key="AWS_REGION"),
    Value("volumes.state", "quantity"),
    Value("volumes.pulumiHome", "quantity"),
    Value("volumes.tmp", "quantity"),
    Value("volumes.facts", "quantity"),
    Value("service.workers", "int", low=1, high=64),
    Value("service.metricsPort", "int", low=1024, high=65535),
    Value("service.policy", "enum"),
    Value("service.resources", "resources"),
    Value("runners.replicas", "int", low=1, high=500),
    Value("runners.workers", "int", low=1, high=16),
    Value("runners.claimTtl", "int", low=5, high=600),
    Value("runners.keepRuns", "int", low=1, high=1000),
    Value("runners.resources", "resources"),
    Value("registry.publicUrl", "url"),
    Value("registry.factsDbSecret", "str"),
    Value("registry.resources", "resources"),
    Value("registry.tokenAudiences", "list"),
    Value("monitoring.labels", "map"),
    Value("console.resources", "resources"),
)
# Keys that only switch (their value is the switch itself).
SWITCH_ONLY = ("registry.enabled", "monitoring.enabled", "service.executor", "console.enabled",
               "console.secureCookies")
BY_NAME = {s.name: s for s in SWITCHES}
BY_KEY = {v.key: v for v in VALUES}


def unplaced_keys(keys: Iterable[str]) -> list[str]:
    """Documented keys the chart would not carry: neither a value nor a switch."""
    placed = {v.key for v in VALUES} | set(SWITCH_ONLY)
    return sorted(set(keys) - placed)


Combo = frozenset[str]  # the switches that are on


def combos(names: Iterable[str]) -> list[Combo]:
    """Every combination of these switches that can be on together (a switch's needs, among `names`, on with it).
    A switch outside `names` does not matter to whoever asks: `closed()` turns on what the render needs."""
    names = sorted(names)
    out = []
    for bits in itertools.product((False, True), repeat=len(names)):
        combo = frozenset(n for n, b in zip(names, bits) if b)
        if all(need in combo for n in combo for need in BY_NAME[n].needs if need in names):
            out.append(combo)
    return out


def closed(combo: Combo) -> Combo:
    """combo with what its switches need turned on too."""
    return frozenset(combo).union(*(BY_NAME[name].needs for name in combo))


def without(combo: Combo, name: str) -> Combo:
    """combo with `name` off, and the switches that need it off too."""
    return frozenset(n for n in combo if n != name and name not in BY_NAME[n].needs)


# --- markers ------------------------------------------------------------------------------------------------------

def marker(value: Value, variant: int, taken: str = "") -> Any:
    """The marker of `value` in render `variant` (0 or 1): valid for the model, unlike anything else rendered.
    `taken`: the text of a render without markers; an int marker is a number that appears nowhere in it."""
    tok = f"{MARK}{variant}x{VALUES.index(value)}y"  # no marker is the start of another
    if value.kind == "int":
        for n in range(value.high - variant, value.low - 1, -2):  # variants take different numbers
            if not re.search(rf"(?<![\w.]){n}(?![\w.])", taken):
                return n
        raise ValueError(f"no marker number for {value.key} in {value.low}..{value.high}")
    if value.kind == "quantity":
        return f"{7001 + 100 * variant + VALUES.index(value)}Mi"
    if value.kind == "resources":
        base = 8001 + 100 * variant + 10 * VALUES.index(value)
        return {"requests": {"cpu": f"{base}m", "memory": f"{base + 1}Mi"},
                "limits": {"cpu": f"{base + 2}m", "memory": f"{base + 3}Mi"}}
    if value.kind == "map":
        return {value.map_key or f"{tok}-k": f"{tok}-v"}
    if value.kind == "list":
        return [f"{tok}-a", f"{tok}-b"]
    if value.kind == "image":
        return f"{tok}.invalid/{tok}/hubwright:{tok}"
    if value.kind == "arn":
        return f"arn:aws:iam::{700000000000 + 100 * variant + VALUES.index(value)}:role/{tok}"
    if value.kind == "url":
        return f"s3://{tok}"
    return tok  # str, enum (set past the model's check: only a marker is rendered with it)


# --- from a rendered object to its template ------------------------------------------------------------------------

def escape(text: str) -> str:
    """Text that is not ours to template (a Prometheus rule's {{ $labels.x }}) is printed as it is."""
    return re.sub(r"\{\{|\}\}", lambda m: '{{ "{{" }}' if m.group() == "{{" else '{{ "}}" }}', text)


def _ref(key: str) -> str:
    return ".Values." + key


def template_values(text: str, marks: Mapping[str, Any]) -> str:
    """`text` (an object as YAML, escaped) with every marker replaced by its key's action."""
    for key, mark in sorted(marks.items(), key=lambda kv: -len(str(kv[1]))):  # longest first
        kind = BY_KEY[key].kind
        ref = _ref(key)
        if kind == "resources":
            text = _block(text, mark, ref)
        elif kind == "map":
            text = _map(text, mark, ref)
        elif kind == "list":
            a, b = mark
            text = text.replace(f'["{a}", "{b}"]',
                                f'[{{{{ range $i, $a := {ref} }}}}{{{{ if $i }}}}, {{{{ end }}}}'
                                f'{{{{ $a | quote }}}}{{{{ end }}}}]')
            text = text.replace(f"{a}, {b}", f'{{{{ join ", " {ref} }}}}')
            text = re.sub(rf"(?m)^( *)- {re.escape(a)}\n\1- {re.escape(b)}$",
                          lambda m: f"{m[1]}{{{{- range {ref} }}}}\n{m[1]}- {{{{ . | quote }}}}\n{m[1]}{{{{- end }}}}",
                          text)
        else:
            text = _scalar(text, str(mark), ref, number=kind == "int")
    return text


def _scalar(text: str, mark: str, ref: str, number: bool) -> str:
    """A string or number: `| quote` where it is a whole string scalar, bare where it is a whole number (an int
    stays an int) or part of a longer string."""
    m = re.escape(mark)
    edge, tail = (r"(?<![\w.])", r"(?![\w.])") if number else ("", "")
    text = re.sub(rf"'{m}'|\"{m}\"", f"{{{{ {ref} | quote }}}}", text)  # a whole quoted scalar
    whole = f"{{{{ {ref} }}}}" if number else f"{{{{ {ref} | quote }}}}"
    text = re.sub(rf"(?m)^( *(?:- )?(?:[\w.\-/]+: )?){m}$", lambda g: g[1] + whole, text)
    return re.sub(rf"{edge}{m}{tail}", f"{{{{ {ref} }}}}", text)  # inside a longer string


def _block(text: str, mark: Mapping[str, Any], ref: str) -> str:
    """A map value written as a block under its key: the whole block becomes toYaml."""
    lines = text.split("\n")
    first = f"{mark['limits']['cpu']}"
    for i, line in enumerate(lines):
        if line.strip() == f"cpu: {first}":
            # limits: / cpu / memory / requests: / cpu / memory, under `resources:` two lines up
            head = i - 2
            indent = len(lines[head]) - len(lines[head].lstrip())
            assert lines[head].strip() == "resources:", lines[head]
            lines[head + 1:head + 7] = [" " * (indent + 2) + f"{{{{- toYaml {ref} | nindent {indent + 2} }}}}"]
            return _block("\n".join(lines), mark, ref)
    return text


def _map(text: str, mark: Mapping[str, str], ref: str) -> str:
    """A map merged into one written by the components: its one marker line becomes a range over the value; when
    it is the key's only entry, the key's block becomes toYaml (an empty map stays `{}`)."""
    (k, v), = mark.items()
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == f"{k}: {v}":
            indent = len(line) - len(line.lstrip())
            parent = out[-1] if out else ""
            alone = (parent.rstrip().endswith(":") and len(parent) - len(parent.lstrip()) == indent - 2
                     and not (i + 1 < len(lines) and _indent(lines[i + 1]) >= indent))
            if alone:
                out.append(" " * indent + f"{{{{- toYaml {ref} | nindent {indent} }}}}")
            else:
                out.extend([f"{{{{- range $k, $v := {ref} }}}}",
                            " " * indent + "{{ $k | quote }}: {{ $v | quote }}",
                            "{{- end }}"])
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip()) if line.strip() else -1


# --- branches -----------------------------------------------------------------------------------------------------

@dataclass
class Variants:
    """One object's text under each combination of the switches that touch it (None: not rendered)."""
    switches: tuple[str, ...]
    texts: dict[Combo, str | None] = field(default_factory=dict)


def _condition(cases: list[Combo], names: tuple[str, ...]) -> str:
    """The test true for exactly `cases` (combos of `names`, among the valid ones): a disjunction of
    conjunctions, each without the switches that do not matter to it."""
    tests = {s.name: s.test for s in SWITCHES}
    all_valid = set(combos(names))
    remaining = set(cases)
    terms: list[dict[str, bool]] = []
    for case in sorted(cases, key=sorted):
        if case not in remaining:
            continue
        term = {n: n in case for n in names}
        for n in names:  # drop a switch when both of its values stay inside `cases`
            trial = {k: b for k, b in term.items() if k != n}
            covered = [c for c in all_valid if _covers(trial, c)]
            if covered and all(c in cases for c in covered):
                term = trial
        terms.append(term)
        remaining -= {c for c in all_valid if _covers(term, c)}
    parts = []
    for term in terms:
        lits = [f"({tests[n]})" if b else f"(not ({tests[n]}))" for n, b in sorted(term.items())]
        parts.append(lits[0] if len(lits) == 1 else "(and " + " ".join(lits) + ")" if lits else "true")
    if not parts:
        return "false"
    return parts[0] if len(parts) == 1 else "or " + " ".join(parts)


def _covers(term: Mapping[str, bool], combo: Combo) -> bool:
    return all((n in combo) == b for n, b in term.items())


def _strip_parens(test: str) -> str:
    return test[1:-1] if test.startswith("(") and test.endswith(")") else test


def branches(variants: Variants) -> str:
    """The object's template: its one text, or an if / else if over the switches for each distinct text."""
    distinct: dict[str | None, list[Combo]] = {}
    for combo, text in variants.texts.items():
        distinct.setdefault(text, []).append(combo)
    if len(distinct) == 1:
        (text,) = distinct
        return text or ""
    out = []
    shown = [(t, cs) for t, cs in distinct.items() if t is not None]
    for n, (text, cases) in enumerate(shown):
        test = _strip_parens(_condition(cases, variants.switches))
        out.append(("{{- if " if n == 0 else "{{- else if ") + test + " }}\n" + text.rstrip("\n"))
    return "\n".join(out) + "\n{{- end }}\n"
