"""The unknown-key warning at `kubectl apply`: a ValidatingAdmissionPolicy bound with `validationActions: [Warn]`
on our own kinds. Pure.

It says what stacks.keys says, in its words: each label or annotation under hubwright.io/ that nothing reads, with
the nearest known key. CEL has no string distance, so the nearest keys are computed here, by stacks.keys.unknown
itself, for the near misses a hand makes of each known key (a letter dropped, doubled or swapped with the next,
another separator, an added or dropped `s` or `d`): a key outside that map is still warned about, with the pointer
to stacks/names.py instead of a suggestion. It never refuses (a warning cannot lose an object) and it fails open:
an error in it must not block an apply. Other projects' kinds (Cluster API, Hive) get the plan's and the Event's
warning only: no policy on their objects.
"""
from __future__ import annotations

from functools import cache

from typing import Iterator

from stacks import names
from stacks.admission import Manifest, policy_binding, validating_policy
from stacks.cluster_policy import cel_string
from stacks.keys import KNOWN_KEYS, unknown

KEYS_POLICY = "hubwright-unknown-keys"
_OURS = (names.CLUSTERS, names.TENANTS, names.HUBCONFIGS, names.GITREPOS, names.STACKRUNS)
_IGNORED = " not a key hubwright reads, so it is ignored"


def _slips(word: str) -> Iterator[str]:
    """The near misses of `word` a hand makes: one letter dropped, doubled or swapped with the next; a separator
    changed; an `s` or a `d` added or dropped at the end."""
    for i in range(len(word)):
        yield word[:i] + word[i + 1:]
        yield word[:i] + word[i] + word[i:]
        if i + 1 < len(word):
            yield word[:i] + word[i + 1] + word[i] + word[i + 2:]
    for old, new in (("-", "_"), ("-", "."), ("-", "")):
        yield word.replace(old, new)
    for end in "sd":
        yield word + end
        if word.endswith(end):
            yield word[:-1]


def near_misses() -> dict[str, str]:
    """Misspelled key -> the known key stacks.keys.unknown suggests for it (the same function: they agree)."""
    return dict(_near_misses())


@cache  # 1,010 fuzzy matches (0.5 s): computed once per process, not once per render of the install
def _near_misses() -> tuple[tuple[str, str], ...]:
    prefix = names.ANNOTATION_PREFIX
    out: dict[str, str] = {}
    for key in sorted(KNOWN_KEYS):
        for slip in _slips(key[len(prefix):]):
            typo = prefix + slip
            if typo in KNOWN_KEYS or typo in out or not slip:
                continue
            [(_, near)] = unknown([typo])
            if near is not None:
                out[typo] = near
    return tuple(out.items())


def _cel_map(mapping: dict[str, str]) -> str:
    return "{" + ", ".join(f"{cel_string(k)}: {cel_string(v)}" for k, v in sorted(mapping.items())) + "}"


def _lines(where: str) -> str:
    """CEL: one line per unknown key of metadata.<where>, in stacks.keys.unknown_key_messages' words."""
    return (f"variables.{where}.map(k, 'metadata.{where}[' + k + ']:{_IGNORED}' + "
            f"(k in variables.near ? '; did you mean ' + variables.near[k] + '?' : "
            f"' (the keys it reads: stacks/names.py)'))")


def keys_policy() -> Manifest:
    prefix = cel_string(names.ANNOTATION_PREFIX)
    known = "[" + ", ".join(cel_string(k) for k in sorted(KNOWN_KEYS)) + "]"
    policy = validating_policy(
        KEYS_POLICY,
        {"resourceRules": [{"apiGroups": [names.GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                            "resources": list(_OURS), "scope": "*"}]},
        [{"expression": "variables.labels.size() + variables.annotations.size() == 0",
          "messageExpression": f"object.kind + ' ' + (has(object.metadata.namespace) ? object.metadata.namespace + '/' "
                               f": '') + object.metadata.name + ': ' + "
                               f"({_lines('labels')} + {_lines('annotations')}).join('; ')"}],
        variables=[
            {"name": "known", "expression": known},
            {"name": "near", "expression": _cel_map(near_misses())},
            {"name": "labels", "expression": f"object.metadata.?labels.orValue({{}}).filter(k, k.startsWith({prefix})"
                                             " && !(k in variables.known))"},
            {"name": "annotations", "expression": f"object.metadata.?annotations.orValue({{}}).filter(k, "
                                                  f"k.startsWith({prefix}) && !(k in variables.known))"},
        ], failure="Ignore")
    return policy


def keys_policy_manifests() -> list[Manifest]:
    """The policy and its binding (Warn: kubectl prints it; nothing is refused), in the order to apply them."""
    policy = keys_policy()
    binding = policy_binding(policy)
    binding["spec"]["validationActions"] = ["Warn"]
    return [policy, binding]
