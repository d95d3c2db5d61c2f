"""What the Git repository controller (automation/service/gitrepos.py) does to a forge, decided here, pure.

- `ownership`: whose the repository found at a HubGitRepo's path is. Hubwright's when it created it (status.
  repositoryID is that repository's, or status.creating names the path: the create was asked for and its answer
  lost), or adopted when the hub administrator annotated the HubGitRepo (stacks.names.ADOPT_REPOSITORY_ANNOTATION
  = "true"). Anything else is refused (RepositoryExists) and never touched.
- `key_changes`: the deploy keys to add, re-add and remove. Only the keys status.deployKeys lists (the ones
  hubwright added) are ever removed or replaced; a wanted key whose name or material is already on the forge
  under a key hubwright did not add is refused, theirs left alone; a key is added with write only when the spec
  says write (a managed key whose write flag or material changed is deleted and added again, never edited).
- `deletion`: what deleting a HubGitRepo does: its managed keys are removed; the repository is deleted only with
  deletionPolicy Delete and only when hubwright created or adopted it.
- the verdicts (`synced`, `unavailable`, `denied`, `stalled`) and the reasons: the phase and the kstatus story of each outcome (Ready; Retrying with
  Reconciling=True when the forge is unavailable; Stalled naming the reason when refused). The controller writes
  them with stacks.conditions.conditions, so a Stalled condition heals once its cause goes away.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from stacks.gitrepos import keys
from stacks.gitrepos.model import DeletionPolicy, DeployKey, GitRepoStatus, ManagedKey, Ownership, Phase
from stacks.names import ADOPT_REPOSITORY_ANNOTATION

# Reasons (the conditions' and, for Stalled, what status.message starts with)
READY = "Ready"
FORGE_UNAVAILABLE = "ForgeUnavailable"  # no answer, a timeout, a 5xx: retried with backoff
TOKEN_SCOPE = "TokenScope"  # 401/403: the token lacks a scope (named when the forge names it)
REPOSITORY_EXISTS = "RepositoryExists"  # a repository hubwright did not make is at the path
INVALID_SPEC = "InvalidSpec"
CREDENTIALS_MISSING = "CredentialsMissing"  # the Secret, or its key, is not in the service's namespace
FORGE_REFUSED = "ForgeRefused"  # anything else the forge refused
DEPLOY_KEY_CONFLICT = "DeployKeyConflict"  # a wanted key is on the forge already as someone else's
DELETING = "Deleting"

State = Literal["ready", "retrying", "stalled"]


# --------------------------------------------------------------------------- whose repository

def repository_exists(path: str) -> str:
    return (f"{REPOSITORY_EXISTS}: {path} exists on the forge and was not made by hubwright; set "
            f"{ADOPT_REPOSITORY_ANNOTATION}=true to take it over")


def ownership(*, path: str, repository_id: str, status: GitRepoStatus,
              annotations: Mapping[str, str] | None) -> tuple[Ownership | None, str | None]:
    """Whose the repository `repository_id` found at `path` is: (Created | Adopted, None), or (None, why it is
    refused). A repository recorded as ours keeps the ownership recorded; one at the path a create was asked for
    (status.creating) is the one that create made; the annotation adopts anything else; without it, refused."""
    if status.repository_id is not None and status.repository_id == repository_id:
        return status.ownership or "Created", None
    if status.creating is not None and status.creating == path and status.repository_id is None:
        return "Created", None
    if (annotations or {}).get(ADOPT_REPOSITORY_ANNOTATION) == "true":
        return "Adopted", None
    return None, repository_exists(path)


# --------------------------------------------------------------------------- deploy keys

@dataclass(frozen=True)
class HeldKey:
    """A deploy key as the forge lists it (automation.adapters.forge.base.ForgeKey)."""

    id: str
    title: str
    key: str
    write: bool


@dataclass(frozen=True)
class KeyPlan:
    remove: tuple[str, ...] = ()  # forge key IDs (only managed ones), removed before anything is added
    add: tuple[DeployKey, ...] = ()  # added as the spec says (write only when it says write)
    keep: tuple[ManagedKey, ...] = ()  # managed keys that stay as they are
    refused: tuple[str, ...] = ()  # one message per wanted key left out, naming it and why

    @property
    def changes(self) -> bool:
        return bool(self.remove or self.add)


def fingerprint(text: str) -> str | None:
    """A key's fingerprint, None when it does not parse (a forge may list keys of types hubwright refuses)."""
    try:
        return keys.parse(text).fingerprint
    except ValueError:
        return None


def key_changes(wanted: Sequence[DeployKey], managed: Sequence[ManagedKey], on_forge: Sequence[HeldKey]) -> KeyPlan:
    """The keys to remove, add and keep so the forge holds `wanted` (module docstring). A managed key the forge no
    longer lists (deleted there by hand) is forgotten and, when still wanted, added again."""
    forge = {key.id: key for key in on_forge}
    want = {key.name: key for key in wanted}
    remove: list[str] = []
    keep: list[ManagedKey] = []
    for held in managed:
        there = forge.get(held.id)
        if there is None:
            continue  # gone from the forge: forgotten (re-added below when wanted)
        spec = want.get(held.name)
        if spec is not None and _same(spec, held, there):
            keep.append(held)
        else:
            remove.append(held.id)
    kept = {key.name for key in keep}
    ours = {held.id for held in managed}
    theirs = [key for key in on_forge if key.id not in ours]
    their_titles = {key.title for key in theirs}
    their_prints = {fingerprint(key.key): key.title for key in theirs} if theirs else {}
    add: list[DeployKey] = []
    refused: list[str] = []
    for spec in wanted:
        if spec.name in kept:
            continue
        print_ = fingerprint(spec.public_key)
        if spec.name in their_titles:
            refused.append(f"deploy key {spec.name}: a key of that name is on the forge and was not added by "
                           "hubwright; it is left alone and this one is not added")
        elif print_ in their_prints:
            refused.append(f"deploy key {spec.name}: the same key is on the forge as {their_prints[print_]!r}, not "
                           "added by hubwright; it is left alone and this one is not added")
        else:
            add.append(spec)
    return KeyPlan(remove=tuple(remove), add=tuple(add), keep=tuple(keep), refused=tuple(refused))


def _same(spec: DeployKey, held: ManagedKey, there: HeldKey) -> bool:
    """The managed key is what the spec asks for, on the forge too (its material and rights as recorded)."""
    wanted = fingerprint(spec.public_key)
    return (held.fingerprint == wanted and held.write == spec.write and fingerprint(there.key) == wanted
            and there.write == spec.write)


def managed_key(spec: DeployKey, key_id: str) -> ManagedKey:
    """The status entry of a key hubwright just added."""
    return ManagedKey(name=spec.name, id=key_id, fingerprint=fingerprint(spec.public_key) or "", write=spec.write)


# --------------------------------------------------------------------------- deletion

@dataclass(frozen=True)
class DeletionPlan:
    remove_keys: tuple[str, ...]  # managed key IDs still on the forge
    delete_repository: bool


def deletion(*, policy: DeletionPolicy, ownership: Ownership | None, managed: Sequence[ManagedKey],
             on_forge: Sequence[HeldKey]) -> DeletionPlan:
    """Deleting a HubGitRepo: the keys hubwright added go; the repository too with Delete, and only if hubwright
    created or adopted it (a repository it refused is never deleted, whatever the policy)."""
    there = {key.id for key in on_forge}
    return DeletionPlan(remove_keys=tuple(held.id for held in managed if held.id in there),
                        delete_repository=policy == "Delete" and ownership is not None)


# --------------------------------------------------------------------------- the outcome

@dataclass(frozen=True)
class Verdict:
    """The phase, the kstatus state (stacks.conditions.conditions) and the reason and message."""

    phase: Phase
    state: State
    reason: str
    message: str
    retry: bool = False  # the forge failed: try again with backoff
    notes: tuple[str, ...] = field(default=())


def synced(refused: Sequence[str] = ()) -> Verdict:
    """The forge was made to match the spec: Ready; or, when wanted keys were refused (plan.key_changes), Stalled
    DeployKeyConflict naming them (the rest of the spec, the other keys included, is in place all the same)."""
    if refused:
        return Verdict("Stalled", "stalled", DEPLOY_KEY_CONFLICT, f"{DEPLOY_KEY_CONFLICT}: " + "; ".join(refused),
                       notes=tuple(refused))
    return Verdict("Ready", "ready", READY, "the repository matches the spec")


def unavailable(detail: str, *, deleting: bool = False) -> Verdict:
    """The forge did not answer (or 5xx): Retrying, with backoff; a deletion waits (the finalizer holds)."""
    what = "the deletion waits for it (the finalizer stays)" if deleting else "retried with backoff"
    return Verdict("Deleting" if deleting else "Retrying", "retrying", FORGE_UNAVAILABLE,
                   f"{FORGE_UNAVAILABLE}: the forge is unavailable ({detail}); {what}", retry=True)


def denied(detail: str, scope: str | None) -> Verdict:
    """The forge refused the token (401/403)."""
    need = f"the forge token lacks the scope {scope!r}" if scope else "the forge refused the token"
    return Verdict("Stalled", "stalled", TOKEN_SCOPE, f"{TOKEN_SCOPE}: {need} ({detail})")


def stalled(reason: str, message: str) -> Verdict:
    """Refused: nothing more is done until the spec, the annotation, the Secret or the forge changes."""
    text = message if message.startswith(f"{reason}:") else f"{reason}: {message}"
    return Verdict("Stalled", "stalled", reason, text)


def credentials_missing(secret: str, key: str, namespace: str) -> Verdict:
    return stalled(CREDENTIALS_MISSING, f"the Secret {namespace}/{secret} with the key {key!r} (the forge token) "
                                        "is not there; the hub administrator creates it in the service's namespace")
