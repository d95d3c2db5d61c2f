"""The HubGitRepo kind: one repository on a forge (Gitea, GitLab, GitHub), made to match its spec by the service's
Git repository controller (automation/service/gitrepos.py), and the template a HubTenant gives its repositories.

A HubGitRepo's spec names the forge and a Secret holding the forge's API token. That Secret is always read from the
*service's* namespace, never the HubGitRepo's: the forge token is the hub administrator's, and tenants can neither
read it nor point a HubGitRepo at another Secret of theirs (tenants only read HubGitRepos; the templates of their
HubTenant, which only the hub administrator writes, make them).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, Field, model_validator

from stacks.gitrepos import keys
from stacks.model.fields import DeletionPolicy, DisplayName, Spec
from stacks.model.resource import Resource
from stacks.names import GITREPO
from stacks.status import Condition, StatusModel, Time

Forge = Literal["gitea", "gitlab", "github"]
FORGES: tuple[Forge, ...] = ("gitea", "gitlab", "github")
Phase = Literal["Pending", "Ready", "Retrying", "Stalled", "Deleting"]
Ownership = Literal["Created", "Adopted"]

# owner/name, where GitLab's owner may be a group with subgroups (a/b/c/name). Each part starts with a letter or
# digit; no part is "." or "..", and the name does not end in ".git" (forges strip it: two names for one repo).
SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
PATH_PATTERN = rf"^{SEGMENT}(/{SEGMENT}){{1,5}}$"
OWNER_PATTERN = rf"^{SEGMENT}(/{SEGMENT}){{0,4}}$"
KEY_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?$"
# A template file's path in the repository: relative, no "." or ".." part, no ".git" part.
FILE_PATH_PATTERN = r"^[A-Za-z0-9_.-][A-Za-z0-9_./-]{0,254}$"
TEMPLATE_FILES_MAX = 50
TEMPLATE_FILE_MAX = 65536  # characters per file
URL_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$"


def _path(value: str) -> str:
    if value.lower().endswith(".git"):
        raise ValueError(f"{value!r}: a repository name does not end in .git (the forge would strip it)")
    return value


def _file_path(value: str) -> str:
    parts = value.split("/")
    if any(part in ("", ".", "..") for part in parts) or ".git" in (part.lower() for part in parts):
        raise ValueError(f"{value!r}: a template file's path is relative, with no empty, '.', '..' or '.git' part")
    return value


def _public_key(value: str) -> str:
    return keys.parse(value).canonical


RepoPath = Annotated[str, Field(pattern=PATH_PATTERN, max_length=255), AfterValidator(_path)]
Owner = Annotated[str, Field(pattern=OWNER_PATTERN, max_length=200)]
ApiURL = Annotated[str, Field(pattern=URL_PATTERN, max_length=300)]
PublicKeyText = Annotated[str, Field(min_length=1, max_length=keys.KEY_MAX), AfterValidator(_public_key)]
TemplateFiles = Annotated[
    dict[Annotated[str, Field(pattern=FILE_PATH_PATTERN, max_length=255), AfterValidator(_file_path)],
         Annotated[str, Field(max_length=TEMPLATE_FILE_MAX)]],
    Field(max_length=TEMPLATE_FILES_MAX)]


class SecretRef(Spec):
    """A Secret in the service's namespace holding the forge's API token (and, optionally, its SSH host keys)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", max_length=253,
        description="The Secret's name, in the service's namespace (hubwright-system).")
    key: str = Field("token", pattern=r"^[-._a-zA-Z0-9]{1,253}$", max_length=253,
        description="The key holding the API token (default token). The optional key hostKeys pins the forge's SSH "
                    "host keys (known_hosts lines); without it they are read from the forge's SSH server.")


class DeployKey(Spec):
    """An SSH public key that may clone (and, with write, push to) the repository."""

    name: str = Field(pattern=KEY_NAME_PATTERN, max_length=64, description="The key's name (its title on the forge).")
    public_key: PublicKeyText = Field(description="One OpenSSH public key: '<type> <base64>' and an optional comment. "
                                                  "No options; RSA from 3072 bits.")
    write: bool = Field(False, description="May push. Default false: read only.")


def _unique_keys(deploy_keys: list[DeployKey]) -> None:
    seen: set[str] = set()
    for key in deploy_keys:
        if key.name in seen:
            raise ValueError(f"deploy key name {key.name!r} is given twice")
        seen.add(key.name)


class _Repository(Spec):
    """What a HubGitRepo and a HubTenant's template say alike: the forge, its token, and what the repository gets."""

    forge: Forge = Field(description="The forge's API: gitea, gitlab or github.")
    api_url: ApiURL = Field(alias="apiURL",
        description="The forge's site or API root: https://gitea.example.com (or …/api/v1), https://gitlab.com (or "
                    "…/api/v4), https://api.github.com (GitHub Enterprise Server: https://<host>/api/v3).")
    credentials_secret_ref: SecretRef = Field(description="The Secret (in the service's namespace) with the API token.")
    display_name: DisplayName | None = Field(None, description="A name for people (GitLab's project name).")
    description: Annotated[str, Field(max_length=1024)] = Field("", description="The repository's description.")
    deletion_policy: DeletionPolicy = Field("Retain",
        description="What deleting the HubGitRepo does to the repository: Retain (default) keeps it, Delete deletes "
                    "it. Either way the deploy keys hubwright added are removed.")
    template_files: TemplateFiles = Field(default_factory=dict,
        description="Files (path: content) of the first commit, written only when hubwright creates the repository.")

    @model_validator(mode="after")
    def _keys(self) -> "_Repository":
        _unique_keys(getattr(self, "deploy_keys", []))
        return self


class GitRepoSpec(_Repository):
    """One repository on a forge, and who may clone it."""

    path: RepoPath = Field(description="owner/name on the forge (GitLab: group/subgroup/name).")
    deploy_keys: list[DeployKey] = Field(default_factory=list, max_length=20,
        description="The deploy keys hubwright keeps on the repository. Keys it did not add are never touched.")


class GitRepo(Resource):
    kind: Literal["HubGitRepo"] = "HubGitRepo"
    spec: GitRepoSpec

    @property
    def ref(self) -> str:
        return f"{GITREPO.kind} {self.metadata.namespace}/{self.metadata.name}"


class ManagedKey(StatusModel):
    """A deploy key hubwright added to the repository (only these are ever changed or removed)."""

    name: str = Field(max_length=64, description="The key's name in spec.deployKeys.")
    id: str = Field(max_length=64, description="The forge's ID of the key.")
    fingerprint: str = Field(max_length=128, description="SHA256:... of the public key.")
    write: bool = Field(False, description="Whether it may push.")


class GitRepoStatus(StatusModel):
    """What the controller found and did on the forge."""

    phase: Phase | None = Field(None, description="Pending, Ready, Retrying (the forge failed; tried again with "
                                                  "backoff), Stalled (refused; see the conditions) or Deleting.")
    url: str | None = Field(None, max_length=1024, description="The repository's HTTPS clone URL.")
    ssh_url: str | None = Field(None, alias="sshURL", max_length=1024, description="The repository's SSH clone URL.")
    host_keys: list[Annotated[str, Field(max_length=16384)]] = Field(default_factory=list, max_length=16,
        description="The forge's SSH host keys, as known_hosts lines.")
    repository_id: str | None = Field(None, alias="repositoryID", max_length=64,
        description="The forge's ID of the repository hubwright created or adopted.")
    ownership: Ownership | None = Field(None,
        description="Created (hubwright made it) or Adopted (the hubwright.io/adopt-repository annotation).")
    creating: str | None = Field(None, max_length=255,
        description="Set just before hubwright asks the forge to create the repository, until it is recorded: a "
                    "repository found at this path then is the one hubwright created.")
    deploy_keys: list[ManagedKey] = Field(default_factory=list, max_length=32,
        description="The deploy keys hubwright added and keeps.")
    message: str | None = Field(None, max_length=1024, description="What the controller did, or why not.")
    conditions: list[Condition] = Field(default_factory=list, max_length=8,
        description="kstatus: Ready, Reconciling (retrying), Stalled (refused, with the reason).")
    observed_generation: int | None = Field(None, ge=0, description="The generation the status describes.")
    last_sync_time: Time | None = Field(None, description="When the forge last matched the spec (RFC 3339).")


# --------------------------------------------------------------------------- a HubTenant's templates

class GitRepoTemplate(_Repository):
    """How a HubTenant's repositories are made: on which forge, under which owner, with which keys. The names come
    from the IDs: the tenant's repository is <owner>/<tenant>, a cluster's catalog <owner>/<tenant>.<cluster>; the
    display name defaults to the tenant's or the cluster's."""

    owner: Owner = Field(description="The user, organisation or group the repositories are made under.")
    deploy_keys: list[DeployKey] = Field(default_factory=list, max_length=16,
        description="Deploy keys every repository made from this template gets (a cluster's agent key is added).")


class ClusterTemplate(Spec):
    """What every HubCluster of the tenant gets."""

    git_repo_template: GitRepoTemplate | None = Field(None,
        description="Each HubCluster's catalog repository (<owner>/<tenant>.<cluster>).")


API_PATHS: dict[str, str] = {"gitea": "/api/v1", "gitlab": "/api/v4", "github": ""}


def api_root(forge: Forge, api_url: str) -> str:
    """The root of the forge's REST API. Gitea's and GitLab's apiURL may be the site (https://git.example.com) or
    the API root (…/api/v1, …/api/v4); GitHub's is https://api.github.com, or https://<host>/api/v3 for GitHub
    Enterprise Server, as given."""
    url, suffix = api_url.rstrip("/"), API_PATHS[forge]
    return url if not suffix or url.endswith(suffix) else url + suffix


def status_of(raw: Mapping[str, Any]) -> GitRepoStatus:
    """A HubGitRepo's status as the model reads it (an unreadable one: empty)."""
    try:
        return GitRepoStatus.model_validate(raw.get("status") or {})
    except ValueError:
        return GitRepoStatus()
