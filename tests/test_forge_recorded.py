"""The GitLab and GitHub adapters against recorded responses: no GitLab or GitHub runs here, so each call is
checked against the exchanges in tests/recorded/forge/<forge>/*.json, taken from the forges' REST documentation
(each file names its sources). The replay asserts every request the adapter makes (method, path and query,
JSON body, the token header, nothing more or less than recorded) and answers with the recorded response
through httpx's MockTransport, so the adapters' own HTTP plumbing (automation/adapters/forge/http.py) runs.

What is covered: create/get/update/delete, the one-commit seed, deploy keys added, listed and removed with
read-only kept read-only, the host keys (GitHub's /meta), 401 and 403 with the missing scope named, a taken
name (GitLab 400, GitHub 422) as ForgeConflict, 5xx, 429 and GitHub's rate-limit 403 as ForgeUnavailable."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from automation.adapters.forge import forge_for, hostkeys
from automation.adapters.forge.base import (ForgeConflict, ForgeDenied, ForgeError, ForgeKey, ForgeUnavailable,
                                           Repository)

RECORDED = Path(__file__).parent / "recorded" / "forge"
TOKEN = "recorded-token-0123456789abcdef"
API = {"gitlab": "https://gitlab.example.com/api/v4", "github": "https://api.github.com"}
AUTH = {"gitlab": ("PRIVATE-TOKEN", TOKEN), "github": ("Authorization", f"Bearer {TOKEN}")}
KEY_RO = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOOMZjJycgHxnbFkWDnVenG9Bw1LZclt4hDY+32I9h1l"
KEY_RW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILHpfJc985AaYpOulK5cbXOXjdrWDpr/IBaCI4JFSpgj"
FILES = {"manifests/apps.yaml": "apps: []\n", "README.md": "# catalog\n"}


class Replay:
    """Answers each request with the next recorded exchange, after checking the request is the recorded one."""

    def __init__(self, forge: str, name: str):
        self.forge = forge
        recorded = json.loads((RECORDED / forge / f"{name}.json").read_text())
        assert recorded["source"], f"{forge}/{name}.json must say where its responses come from"
        self.exchanges: list[dict[str, Any]] = recorded["exchanges"]
        self.base = httpx.URL(API[forge])
        self.seen = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert self.seen < len(self.exchanges), f"unrecorded request {request.method} {request.url}"
        exchange = self.exchanges[self.seen]
        self.seen += 1
        want, answer = exchange["request"], exchange["response"]
        assert (request.method, request.url.raw_path.decode()) == (want["method"], want["path"]), exchange
        assert (request.url.scheme, request.url.host) == (self.base.scheme, self.base.host)
        header, value = AUTH[self.forge]
        assert request.headers.get(header) == value
        if self.forge == "github":
            assert request.headers["accept"] == "application/vnd.github+json"
            assert request.headers["x-github-api-version"] == "2022-11-28"
        body = json.loads(request.content) if request.content else None
        assert body == want.get("json"), f"{want['method']} {want['path']}: body {body!r}"
        if "json" in answer:
            return httpx.Response(answer["status"], headers=answer.get("headers"), json=answer["json"])
        return httpx.Response(answer["status"], headers=answer.get("headers"), text=answer.get("text", ""))

    def finished(self) -> None:
        assert self.seen == len(self.exchanges), f"{len(self.exchanges) - self.seen} recorded request(s) never made"


def replayed(forge: str, name: str):
    replay = Replay(forge, name)
    return forge_for(forge, API[forge], TOKEN, timeout=5, transport=httpx.MockTransport(replay)), replay


def test_gitlab_lifecycle():
    forge, replay = replayed("gitlab", "lifecycle")
    assert forge.check() == "hubwright-bot"
    assert forge.get("acme/acme.c-1") is None
    repo = forge.create("acme/acme.c-1", description="Catalog of cluster c-1", display_name=None)
    assert repo.id == "42" and repo.empty and repo.path == "acme/acme.c-1"
    assert (repo.ssh_url, repo.http_url) == ("git@gitlab.example.com:acme/acme.c-1.git",
                                             "https://gitlab.example.com/acme/acme.c-1.git")
    updated = forge.update(repo, description="changed", display_name="Acme c-1")
    assert (updated.description, updated.display_name) == ("changed", "Acme c-1")
    forge.seed(repo, FILES, "hubwright: first commit")
    assert forge.get("acme/acme.c-1").empty is False

    assert forge.keys(repo) == []
    agent = forge.add_key(repo, "hubwright-agent", KEY_RO, write=False)
    ci = forge.add_key(repo, "ci", KEY_RW, write=True)
    assert agent == ForgeKey(id="13", title="hubwright-agent", key=KEY_RO, read_only=True)  # comment dropped
    assert ci.read_only is False
    assert forge.keys(repo) == [agent, ci]
    forge.delete_key(repo, "13")
    forge.delete_key(repo, "13")  # gone already is fine
    forge.delete(repo)
    forge.delete(repo)
    replay.finished()


def test_gitlab_taken_name_is_a_conflict():
    forge, replay = replayed("gitlab", "taken")
    forge.check()
    with pytest.raises(ForgeConflict) as conflict:
        forge.create("acme/acme.c-1", description="", display_name=None)
    assert "has already been taken" in str(conflict.value)
    replay.finished()


def test_gitlab_missing_scope_and_refused_token():
    forge, replay = replayed("gitlab", "scope")
    repo = _gitlab_repo(forge)
    with pytest.raises(ForgeDenied) as denied:
        forge.add_key(repo, "hubwright-agent", KEY_RO, write=False)
    assert denied.value.scope == "api" and "'api'" in str(denied.value) and "403" in str(denied.value)
    with pytest.raises(ForgeDenied) as refused:
        forge.check()
    assert refused.value.scope is None and "401" in str(refused.value)
    assert TOKEN not in str(denied.value) + str(refused.value)
    replay.finished()


def test_gitlab_unavailable():
    forge, replay = replayed("gitlab", "unavailable")
    with pytest.raises(ForgeUnavailable) as down:
        forge.get("acme/acme.c-1")
    assert "502" in str(down.value) and "GitLab is not responding" in str(down.value)
    with pytest.raises(ForgeUnavailable) as limited:
        forge.check()
    assert "429" in str(limited.value)
    replay.finished()


def _gitlab_repo(forge):
    """The recorded project as get() would return it (check() takes the file's first exchange)."""
    assert forge.check() == "hubwright-bot"
    return Repository(id="42", path="acme/acme.c-1", http_url="https://gitlab.example.com/acme/acme.c-1.git",
                      ssh_url="git@gitlab.example.com:acme/acme.c-1.git", description="", display_name="acme.c-1")


def test_github_lifecycle():
    forge, replay = replayed("github", "lifecycle")
    assert forge.check() == "octocat"
    assert forge.get("octo-org/acme.c-1") is None
    repo = forge.create("octo-org/acme.c-1", description="Catalog of cluster c-1", display_name="ignored")
    assert (repo.id, repo.path, repo.empty) == ("1296269", "octo-org/acme.c-1", True)
    assert repo.ssh_url == "git@github.com:octo-org/acme.c-1.git"
    assert forge.update(repo, description="changed", display_name=None).description == "changed"
    assert forge.get("octo-org/acme.c-1").empty is True  # size 0 and "Git Repository is empty."
    forge.seed(repo, FILES, "hubwright: first commit")  # one parentless commit of both files, the branch forced
    assert forge.get("octo-org/acme.c-1").empty is False

    assert forge.keys(repo) == []
    agent = forge.add_key(repo, "hubwright-agent", KEY_RO, write=False)
    ci = forge.add_key(repo, "ci", KEY_RW, write=True)
    assert (agent.read_only, ci.read_only) == (True, False)
    assert forge.keys(repo) == [agent, ci]
    forge.delete_key(repo, agent.id)
    forge.delete_key(repo, agent.id)

    lines = forge.host_keys(repo)
    assert [line.split()[:2] for line in lines] == [["github.com", "ecdsa-sha2-nistp256"],
                                                    ["github.com", "ssh-ed25519"], ["github.com", "ssh-rsa"]]
    forge.delete(repo)
    forge.delete(repo)
    replay.finished()


def test_github_taken_name_is_a_conflict():
    forge, replay = replayed("github", "taken")
    with pytest.raises(ForgeConflict) as conflict:
        forge.create("octocat/acme.c-1", description="", display_name=None)  # the token's own user: /user/repos
    assert "422" in str(conflict.value) and "name already exists on this account" in str(conflict.value)
    replay.finished()


def test_github_missing_scope_permission_refused_token_and_rate_limit():
    forge, replay = replayed("github", "scope")
    repo = Repository(id="1296269", path="octo-org/acme.c-1", http_url="https://github.com/octo-org/acme.c-1.git",
                      ssh_url="git@github.com:octo-org/acme.c-1.git", description="")
    with pytest.raises(ForgeDenied) as classic:
        forge.delete(repo)
    assert classic.value.scope == "delete_repo" and "Must have admin rights" in str(classic.value)
    with pytest.raises(ForgeDenied) as fine_grained:
        forge.add_key(repo, "hubwright-agent", KEY_RO, write=False)
    assert fine_grained.value.scope == "administration=write"
    with pytest.raises(ForgeDenied) as refused:
        forge.check()
    assert refused.value.scope is None and "Bad credentials" in str(refused.value)
    with pytest.raises(ForgeUnavailable) as limited:  # a 403 that means "later", not "denied"
        forge.get("octo-org/acme.c-1")
    assert "rate limit" in str(limited.value)
    replay.finished()


def test_github_unavailable():
    forge, replay = replayed("github", "unavailable")
    with pytest.raises(ForgeUnavailable):
        forge.get("octo-org/acme.c-1")
    with pytest.raises(ForgeUnavailable) as down:
        forge.check()
    assert "500 Server Error" in str(down.value)
    replay.finished()


@pytest.mark.parametrize("kind", ["gitlab", "github"])
def test_no_answer_is_unavailable_and_the_token_never_shows(kind):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"connection refused ({TOKEN})", request=request)

    forge = forge_for(kind, API[kind], TOKEN, timeout=5, transport=httpx.MockTransport(refuse))
    with pytest.raises(ForgeUnavailable) as down:
        forge.check()
    assert TOKEN not in str(down.value) and "unreachable" in str(down.value)

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"message": f"bad token {TOKEN}"})

    forge = forge_for(kind, API[kind], TOKEN, timeout=5, transport=httpx.MockTransport(echo))
    with pytest.raises(ForgeError) as refused:
        forge.check()
    assert TOKEN not in str(refused.value) and "<token>" in str(refused.value)


def test_an_unknown_forge_is_refused():
    with pytest.raises(ForgeError, match="bitbucket.*expected one of gitea, github, gitlab"):
        forge_for("bitbucket", "https://example.com", TOKEN)


@pytest.mark.parametrize("kind", ["gitea", "gitlab", "github"])
@pytest.mark.parametrize("path", ["../admin", "acme/..", "acme/../../user", "acme//x", "/acme/x", "acme",
                                  "acme/x?sudo=root", "acme/x#", "acme/%2e%2e"])
def test_a_path_that_would_leave_its_place_never_reaches_a_url(kind, path):
    """Defence in depth under the model's own check: whoever calls the adapter, a crafted path is refused before
    any request (a `..` part would be resolved away by URL normalisation, a `?` would add parameters)."""
    def nothing(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request may be made, got {request.method} {request.url}")

    forge = forge_for(kind, API.get(kind, "https://gitea.example.com/api/v1"), TOKEN, timeout=5,
                      transport=httpx.MockTransport(nothing))
    with pytest.raises(ForgeError, match="repository path"):
        forge.get(path)
    with pytest.raises(ForgeError, match="repository path"):
        forge.create(path, description="", display_name=None)


@pytest.mark.parametrize("kind", ["gitea", "gitlab", "github"])
@pytest.mark.parametrize("file", ["../escape", "a/../../b", "./x", "a//b", ""])
def test_a_seed_file_outside_the_repository_is_refused_before_any_request(kind, file):
    def nothing(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request may be made, got {request.method} {request.url}")

    forge = forge_for(kind, API.get(kind, "https://gitea.example.com/api/v1"), TOKEN, timeout=5,
                      transport=httpx.MockTransport(nothing))
    repo = Repository(id="1", path="acme/x", http_url="https://h/acme/x.git", ssh_url="git@h:acme/x.git",
                      description="")
    with pytest.raises(ForgeError, match="file path"):
        forge.seed(repo, {"README.md": "ok\n", file: "x"}, "first")


@pytest.mark.parametrize("kind", ["gitea", "gitlab", "github"])
def test_a_redirect_is_never_followed_so_the_token_stays_with_the_api_url(kind):
    """A forge (or whatever answers at its URL) that redirects elsewhere gets no second request: the token
    header would go with it. The redirect is an error naming where it pointed."""
    seen: list[str] = []

    def redirect(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "https://attacker.example/steal"})

    api = API.get(kind, "https://gitea.example.com/api/v1")
    forge = forge_for(kind, api, TOKEN, timeout=5, transport=httpx.MockTransport(redirect))
    with pytest.raises(ForgeError) as refused:
        forge.check()
    assert not isinstance(refused.value, (ForgeUnavailable, ForgeDenied, ForgeConflict))
    assert "302" in str(refused.value) and "attacker.example" in str(refused.value)
    assert len(seen) == 1 and seen[0].startswith(api)


@pytest.mark.parametrize("url", ["ssh://git@-oProxyCommand=touch%20x/acme/x.git", "-oProxyCommand=sh:acme/x.git",
                                 "git@-p:acme/x.git", "ssh://git@host:0/acme/x.git", "https://host/acme/x.git",
                                 "ssh://git@host:99999/acme/x.git"])
def test_an_ssh_url_that_is_no_host_never_reaches_ssh_keyscan(url):
    with pytest.raises(ForgeError, match="SSH URL"):
        hostkeys.endpoint(url)


@pytest.mark.parametrize("url, endpoint", [
    ("ssh://git@127.0.0.1:2222/acme/x.git", ("127.0.0.1", 2222)), ("git@github.com:acme/x.git", ("github.com", 22)),
    ("ssh://git@gitea.example.com/acme/x.git", ("gitea.example.com", 22)), ("ssh://git@[::1]:2222/a/x.git", ("::1", 2222))])
def test_ssh_url_forms(url, endpoint):
    assert hostkeys.endpoint(url) == endpoint
    assert hostkeys.known_host(*endpoint) == (endpoint[0] if endpoint[1] == 22 else f"[{endpoint[0]}]:{endpoint[1]}")
