"""The Git repository controller: each HubGitRepo becomes a repository on its forge (docs/registry.md).

    Manager: Informer(hubgitrepos) ─► DictStore ─► WorkQueue ──► one worker ──► reconcile("namespace/name")
                                                   (+ a resync of every HubGitRepo each `resync` seconds)

`setup(manager, objects=, source=, namespace=)` declares its watches on the runtime (automation/kit/runtime.py).
What it does is decided in stacks.gitrepos.plan; here it is read from and written to the API server, through the
object port (automation.kit.objects.Objects) only, and the forge (automation.adapters.forge: one `Forge` per forge
API, built by the injected `forge_for(kind, api_url, token, timeout=)`):

- the finalizer stacks.names.GITREPO_FINALIZER, before the forge is touched;
- the forge token: the Secret spec.credentialsSecretRef names, read from the *service's* namespace (`namespace`),
  never the HubGitRepo's; its optional key `hostKeys` pins the forge's SSH host keys (else they are asked of the
  forge). No Secret or no key: Stalled CredentialsMissing;
- the repository: created when missing (status.creating is written first, so a repository found there after a
  crash is known to be the one asked for), and its first commit seeded from spec.templateFiles only then; one
  found at the path is used only when hubwright created it or the adopt annotation is set (plan.ownership), else
  Stalled RepositoryExists and nothing is touched; its description and display name follow the spec;
- the deploy keys (plan.key_changes): only the ones status.deployKeys lists are ever removed or replaced;
- status (the status subresource): url, sshURL, hostKeys, repositoryID, ownership, deployKeys, phase,
  conditions (kstatus), observedGeneration, lastSyncTime.

A forge that does not answer (ForgeUnavailable) is retried with the queue's backoff (Retrying, Reconciling=True);
a refused token is Stalled TokenScope naming the scope. Every HubGitRepo is looked at again every `resync`
seconds: a deploy key removed on the forge by hand is added again, and a Stalled one heals once its cause is gone.

Deleting a HubGitRepo (plan.deletion): its managed keys are removed, the repository deleted only with
deletionPolicy Delete and only when hubwright created or adopted it; then the finalizer goes. While the forge is
down, or refuses the token, the finalizer holds and the status says so (the hub administrator may remove the
finalizer by hand to let the object go and leave the repository as it is).
"""
from __future__ import annotations

import base64
import logging
import threading
import time
from typing import Any, Callable, Mapping

from pydantic import ValidationError

from automation.adapters.backoff import Backoff
from automation.adapters.forge import forge_for as default_forge_for
from automation.adapters.forge.base import (Forge, ForgeConflict, ForgeDenied, ForgeError, ForgeUnavailable,
                                            Repository)
from automation.adapters.kube.informer import DictStore, Raw, Source
from automation.adapters.loop import Every
from automation.kit.finalizers import ensure_finalizer, release_finalizer
from automation.kit.objects import HUBGITREPOS, SECRETS, ApiError, Obj, Objects
from automation.kit.queue import Outcome, WorkQueue
from automation.kit.runtime import Controller, Manager
from automation.kit.status import StatusWriter
from stacks.conditions import conditions
from stacks.gitrepos import plan
from stacks.gitrepos.model import GitRepo, GitRepoStatus, ManagedKey, status_of
from stacks.names import ADOPT_REPOSITORY_ANNOTATION, GITREPO_FINALIZER
from stacks.times import rfc3339_seconds

LOG = logging.getLogger("hubwright.gitrepos")

ForgeFor = Callable[..., Forge]  # (kind, api_url, token, *, timeout) -> Forge
HOST_KEYS = "hostKeys"  # the optional key of the credentials Secret that pins the forge's SSH host keys
SEED_MESSAGE = "hubwright: the template's first commit"
MESSAGE_MAX = 1024


class Refused(Exception):
    """A verdict to write and stop at (Stalled), raised from deep in a reconcile."""

    def __init__(self, verdict: plan.Verdict):
        super().__init__(verdict.message)
        self.verdict = verdict


def setup(manager: Manager, *, objects: Objects, source: Source, namespace: str, forge_for: ForgeFor | None = None,
          backoff: Backoff = Backoff(1.0, 60.0), resync: float = 300.0,
          forge_timeout: float = 30.0) -> GitRepoController:
    """The HubGitRepo controller on `manager`: the HubGitRepos' informer (`source`: automation.adapters.kube.
    kit_sources.gitrepo_source, in one namespace or all) into its store, one worker and the resync; started and
    stopped with the manager. `namespace`: the service's, where the forge tokens' Secrets are read."""
    controller = GitRepoController(objects, namespace=namespace, forge_for=forge_for, backoff=backoff,
                                   resync=resync, forge_timeout=forge_timeout)
    manager.source(source, controller.store)
    controller.controller = manager.controller("gitrepo", controller.reconcile, queue=controller.queue, workers=1)
    manager.runnable(controller.resync)
    return controller


class GitRepoController:
    """Reconciles one HubGitRepo at a time (module docstring)."""

    def __init__(self, objects: Objects, *, namespace: str, forge_for: ForgeFor | None = None,
                 backoff: Backoff = Backoff(1.0, 60.0), resync: float = 300.0, forge_timeout: float = 30.0):
        """Registers nothing: `setup` does."""
        self.objects = objects
        self.status = StatusWriter(objects, HUBGITREPOS)
        self.namespace = namespace
        self.forge_for = forge_for or default_forge_for
        self.forge_timeout = forge_timeout
        self.queue = WorkQueue(backoff)
        self._seen: dict[str, tuple] = {}  # key -> what a reconcile reads of it besides its status
        self._seen_lock = threading.Lock()
        self.store = DictStore(self._changed)
        self.resync = Every("gitrepo-resync", resync, self._resync)
        self.controller: Controller | None = None  # set by setup

    def _changed(self, kind: str, raw: Raw) -> None:
        """A HubGitRepo's spec, annotations, finalizers or deletion changed: reconcile it. Its status, which this
        controller writes, does not wake it (the forge is asked again at the next resync)."""
        obj = Obj(raw)
        key = obj.key
        made_of = (obj.uid, obj.generation, obj.deletion_timestamp, tuple(obj.finalizers),
                   obj.annotations.get(ADOPT_REPOSITORY_ANNOTATION))
        with self._seen_lock:
            if kind == "DELETED":
                self._seen.pop(key, None)
                return
            if self._seen.get(key) == made_of:
                return
            self._seen[key] = made_of
        self.queue.add(key)

    def _resync(self) -> None:
        for key in self.store.keys():
            self.queue.add(key)

    # -- reconcile
    def reconcile(self, key: str) -> Outcome:
        """Level-triggered: reads the HubGitRepo afresh and makes the forge match it. An ApiError propagates:
        the worker logs it and the key comes back with backoff."""
        namespace, name = key.split("/", 1)
        raw = self.objects.get(HUBGITREPOS, name, namespace)
        if raw is None:
            return Outcome.done()
        status = status_of(raw)
        if Obj(raw).deleting:
            return self._finalize(raw, status)
        try:
            repo = GitRepo.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
                                 for e in exc.errors() if e["loc"] and e["loc"][0] == "spec") or str(exc)
            return self._verdict(raw, status, plan.stalled(plan.INVALID_SPEC, f"{_ref(raw)}: {problems}"))
        held = ensure_finalizer(self.objects, HUBGITREPOS, raw, GITREPO_FINALIZER)
        if held is None:
            return Outcome.done()  # gone meanwhile
        raw = held
        try:
            forge, secret = self._forge(repo)
            fields, verdict = self._sync(raw, repo, status, forge, secret)
        except Refused as refused:
            return self._verdict(raw, status, refused.verdict)
        except ForgeUnavailable as exc:
            return self._verdict(raw, status, plan.unavailable(str(exc)))
        except ForgeDenied as exc:
            return self._verdict(raw, status, plan.denied(str(exc), exc.scope))
        except ForgeConflict as exc:
            return self._verdict(raw, status, plan.stalled(plan.REPOSITORY_EXISTS, str(exc)))
        except ForgeError as exc:
            return self._verdict(raw, status, plan.stalled(plan.FORGE_REFUSED, str(exc)))
        return self._verdict(raw, status, verdict, **fields)

    def _sync(self, raw: Raw, repo: GitRepo, status: GitRepoStatus, forge: Forge,
              secret: Mapping[str, str]) -> tuple[dict[str, Any], plan.Verdict]:
        spec = repo.spec
        found = forge.get(spec.path)
        if found is None:
            if status.repository_id is not None:
                LOG.info("%s: repository %s is gone from the forge; creating it again", repo.ref, spec.path)
            # The intent first: a repository found at the path after a crash between here and the record below is
            # the one this create made (plan.ownership).
            self._patch_status(raw, {"creating": spec.path, "repositoryID": None, "ownership": None,
                                     "deployKeys": []})
            status = status.model_copy(update={"creating": spec.path, "repository_id": None, "ownership": None,
                                               "deploy_keys": []})
            try:
                found = forge.create(spec.path, description=spec.description, display_name=spec.display_name)
            except ForgeConflict:  # made by someone else meanwhile: the intent is withdrawn, theirs is refused
                self._patch_status(raw, {"creating": None})
                raise Refused(plan.stalled(plan.REPOSITORY_EXISTS, plan.repository_exists(spec.path))) from None
            LOG.info("%s: created repository %s", repo.ref, spec.path)
        ownership, refusal = plan.ownership(path=spec.path, repository_id=found.id, status=status,
                                            annotations=Obj(raw).annotations)
        if ownership is None:
            raise Refused(plan.stalled(plan.REPOSITORY_EXISTS, refusal or ""))
        first = status.repository_id != found.id  # not recorded yet: created (or adopted) just now, or after a crash
        if found.description != spec.description or (
                found.display_name is not None and spec.display_name and found.display_name != spec.display_name):
            found = forge.update(found, description=spec.description, display_name=spec.display_name)
        if first and ownership == "Created" and found.empty and spec.template_files:
            # Before the record below: a seed that fails is tried again (status.creating still claims the repository).
            forge.seed(found, spec.template_files, SEED_MESSAGE)
        if first:  # recorded before any key is added: from here on it is ours whatever fails next
            self._patch_status(raw, {"repositoryID": found.id, "ownership": ownership, "creating": None,
                                     "deployKeys": []})
        managed = self._keys(raw, repo, [] if first else status.deploy_keys, forge, found)
        host_keys = _pinned(secret) or forge.host_keys(found)
        fields = {"url": found.http_url, "sshURL": found.ssh_url, "hostKeys": host_keys[:16],
                  "repositoryID": found.id, "ownership": ownership, "creating": None,
                  "deployKeys": [key.model_dump(by_alias=True) for key in managed.keys],
                  "lastSyncTime": rfc3339_seconds(time.time())}
        return fields, plan.synced(managed.refused)

    def _keys(self, raw: Raw, repo: GitRepo, recorded: list[ManagedKey], forge: Forge,
              found: Repository) -> "_Managed":
        """Deploy keys per plan.key_changes (`recorded`: the keys status says hubwright added to this repository).
        When a forge call fails midway, what is ours on the forge by then is recorded before the error goes on,
        so a key just added is never taken for someone else's on the next try."""
        held = [plan.HeldKey(key.id, key.title, key.key, not key.read_only) for key in forge.keys(found)]
        changes = plan.key_changes(repo.spec.deploy_keys, recorded, held)
        pending = list(changes.remove)
        managed = list(changes.keep)
        try:
            for key_id in changes.remove:
                forge.delete_key(found, key_id)
                pending.remove(key_id)
            for key in changes.add:
                added = forge.add_key(found, key.name, key.public_key, write=key.write)
                managed.append(plan.managed_key(key, added.id))
        except ForgeError as exc:
            record = [key for key in recorded if key.id in pending] + managed
            self._patch_status(raw, {"deployKeys": [key.model_dump(by_alias=True) for key in record]})
            if isinstance(exc, ForgeConflict):  # the forge holds that key already (on this repository or elsewhere)
                raise Refused(plan.stalled(plan.DEPLOY_KEY_CONFLICT, f"the forge refused a deploy key: {exc}")) from exc
            raise
        if changes.changes:
            LOG.info("%s: deploy keys %s", repo.ref, ", ".join(
                [f"-{key_id}" for key_id in changes.remove] + [f"+{key.name}" for key in changes.add]))
        return _Managed(managed, changes.refused)

    def _finalize(self, raw: Raw, status: GitRepoStatus) -> Outcome:
        obj = Obj(raw)
        if GITREPO_FINALIZER not in obj.finalizers:
            return Outcome.done()
        if status.repository_id is not None or status.creating is not None:
            try:
                repo = GitRepo.model_validate(raw)
            except ValidationError:
                repo = None  # an invalid spec never reached the forge... unless it was edited after: left alone
            if repo is not None:
                try:
                    forge, _ = self._forge(repo)
                    self._carry_out(repo, status, forge)
                except Refused as refused:
                    return self._verdict(raw, status, _deleting(refused.verdict))
                except ForgeUnavailable as exc:
                    return self._verdict(raw, status, plan.unavailable(str(exc), deleting=True))
                except ForgeDenied as exc:
                    return self._verdict(raw, status, _deleting(plan.denied(str(exc), exc.scope)))
                except ForgeError as exc:
                    return self._verdict(raw, status, _deleting(plan.stalled(plan.FORGE_REFUSED, str(exc))))
        release_finalizer(self.objects, HUBGITREPOS, raw, GITREPO_FINALIZER)
        LOG.info("%s: finalizer removed", obj.key)
        return Outcome.done()

    def _carry_out(self, repo: GitRepo, status: GitRepoStatus, forge: Forge) -> None:
        found = forge.get(repo.spec.path)
        if found is None:
            return
        ownership, _ = plan.ownership(path=repo.spec.path, repository_id=found.id, status=status,
                                      annotations=repo.metadata.annotations)
        if ownership is None:
            return  # someone else's: not a key of it is touched
        held = [plan.HeldKey(key.id, key.title, key.key, not key.read_only) for key in forge.keys(found)]
        what = plan.deletion(policy=repo.spec.deletion_policy, ownership=ownership, managed=status.deploy_keys,
                             on_forge=held)
        for key_id in what.remove_keys:
            forge.delete_key(found, key_id)
        if what.delete_repository:
            forge.delete(found)
            LOG.info("%s: deleted repository %s (deletionPolicy Delete)", repo.ref, repo.spec.path)
        else:
            LOG.info("%s: kept repository %s, removed %d deploy key(s)", repo.ref, repo.spec.path,
                     len(what.remove_keys))

    # -- the pieces
    def _forge(self, repo: GitRepo) -> tuple[Forge, Mapping[str, str]]:
        """The forge client, with the token from the Secret in the service's namespace (never the HubGitRepo's)."""
        ref = repo.spec.credentials_secret_ref
        try:
            secret = self.objects.get(SECRETS, ref.name, self.namespace)
        except ApiError as exc:
            if exc.status != 403:
                raise
            secret = None
        if secret is None:  # not there (404), or not ours to read (403)
            raise Refused(plan.credentials_missing(ref.name, ref.key, self.namespace))
        data = {key: _decode(value) for key, value in (secret.get("data") or {}).items()}
        token = (data.get(ref.key) or "").strip()
        if not token:
            raise Refused(plan.credentials_missing(ref.name, ref.key, self.namespace))
        return self.forge_for(repo.spec.forge, repo.spec.api_url, token, timeout=self.forge_timeout), data

    def _verdict(self, raw: Raw, status: GitRepoStatus, verdict: plan.Verdict, **fields: Any) -> Outcome:
        """Write the verdict (phase, message, the kstatus conditions) and `fields` into status; the queue's answer."""
        generation = Obj(raw).generation
        now = rfc3339_seconds(time.time())
        story = conditions(verdict.state, verdict.reason, verdict.message[:MESSAGE_MAX], generation=generation,
                           previous=list(status.conditions), now=now)
        patch = {**fields, "phase": verdict.phase, "message": verdict.message[:MESSAGE_MAX],
                 "conditions": [c.model_dump(by_alias=True, exclude_none=True) for c in story],
                 "observedGeneration": generation}
        current = Obj(raw).status
        if any(current.get(key) != value for key, value in patch.items() if key not in ("lastSyncTime",)):
            if verdict.state != "ready" or current.get("phase") != "Ready":
                LOG.info("%s: %s", _ref(raw), verdict.message)
            self._patch_status(raw, patch)
        if verdict.retry:
            return Outcome.retry()
        if verdict.state == "stalled":
            return Outcome.stall(verdict.reason, recheck=self.resync.interval)
        return Outcome.done()

    def _patch_status(self, raw: Raw, fields: Mapping[str, Any]) -> None:
        self.status.write_entries(raw, {(key,): value for key, value in fields.items()})


class _Managed:
    def __init__(self, keys: list, refused: tuple[str, ...]):
        self.keys, self.refused = keys, refused


def _deleting(verdict: plan.Verdict) -> plan.Verdict:
    """A refusal met while deleting: the finalizer holds, and the message says so."""
    return plan.Verdict("Deleting", verdict.state, verdict.reason,
                        f"{verdict.message}; the deletion waits (the finalizer stays until this is fixed, or the hub "
                        f"administrator removes it and leaves the repository as it is)")


def _pinned(secret: Mapping[str, str]) -> list[str]:
    return [line.strip() for line in (secret.get(HOST_KEYS) or "").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _decode(value: str) -> str:
    try:
        return base64.b64decode(value).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def _ref(raw: Raw) -> str:
    obj = Obj(raw)
    return f"HubGitRepo {obj.namespace}/{obj.name}"
