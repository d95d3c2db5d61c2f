"""The forges' APIs behind one interface (base.Forge): Gitea (gitea.py, tested against a real Gitea), GitLab
(gitlab.py) and GitHub (github.py), both written to their documented REST APIs and tested against recorded
responses. Each is a RestForge (rest.py: the skeleton they share) saying only what differs.
`forge_for(kind, api_url, token)` picks the implementation."""
from __future__ import annotations

from typing import Callable

import httpx

from automation.adapters.forge.base import Forge, ForgeError
from automation.adapters.forge.gitea import Gitea
from automation.adapters.forge.github import GitHub
from automation.adapters.forge.gitlab import GitLab
from automation.adapters.forge.http import DEFAULT_TIMEOUT
from stacks.gitrepos.model import api_root

FORGES: dict[str, Callable[..., Forge]] = {"gitea": Gitea, "gitlab": GitLab, "github": GitHub}


def forge_for(kind: str, api_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
              transport: httpx.BaseTransport | None = None) -> Forge:
    """The adapter for `kind` (gitea, gitlab, github) at `api_url` (a HubGitRepo's spec.apiURL: the site or the API
    root, stacks.gitrepos.model.api_root), every call within `timeout` seconds. `transport` is for tests (recorded
    responses)."""
    try:
        cls = FORGES[kind]
    except KeyError:
        raise ForgeError(f"forge {kind!r}: expected one of {', '.join(sorted(FORGES))}") from None
    return cls(api_root(kind, api_url), token, timeout=timeout, transport=transport)  # type: ignore[arg-type]
