"""The Gitea adapter against a real Gitea v1.26.0 (tests/gitea.py): every Forge method, the deploy key's rights
proven by `git clone` / `git push` over Gitea's own SSH server with the host keys the adapter read (strict host
key checking), and the faults the controller must tell apart: a token without the scope (ForgeDenied naming
it), a name already taken (ForgeConflict, the repository left alone), the forge down or silent
(ForgeUnavailable, within the timeout)."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from automation.adapters.forge import forge_for
from automation.adapters.forge.base import ForgeConflict, ForgeDenied, ForgeError, ForgeUnavailable
from automation.adapters.forge.gitea import Gitea as GiteaForge
import tests.gitea
from tests.gitea import Gitea


def keypair(where: Path, name: str) -> tuple[Path, str]:
    key = where / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test", "-f", str(key)],
                   check=True, capture_output=True)
    return key, key.with_suffix(".pub").read_text().strip()


def git(*args: str, key: Path, known_hosts: Path, port: int, cwd: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(known_hosts.parent),
           "GIT_SSH_COMMAND": (f"ssh -F /dev/null -i {key} -o IdentitiesOnly=yes -o UserKnownHostsFile={known_hosts}"
                               f" -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10 -p {port}")}
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done


@pytest.fixture
def forge(gitea: Gitea) -> GiteaForge:
    # A trailing slash is fine. The timeout bounds a hung call, not a speed: a first commit into a new repository
    # (Gitea runs git for it) took over 10 s beside a loaded 2-worker run. Tests of the timeout set their own.
    return forge_for("gitea", gitea.api + "/", gitea.token, timeout=60)


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns() % 10**9}"


def test_check_create_get_update_delete(gitea: Gitea, forge: GiteaForge):
    assert forge.kind == "gitea"
    assert forge.check() == gitea.admin
    path = f"{gitea.admin}/{unique('crud')}"
    assert forge.get(path) is None
    repo = forge.create(path, description="the acme tenant", display_name="Acme")
    assert (repo.path, repo.description, repo.empty) == (path, "the acme tenant", True)
    assert repo.ssh_url == f"ssh://git@127.0.0.1:{gitea.ssh_port}/{path}.git"
    assert repo.http_url == f"{gitea.url}/{path}.git"
    assert forge.get(path) == repo
    assert gitea.request("GET", f"/repos/{path}").json()["private"] is True  # never public by accident

    updated = forge.update(repo, description="changed", display_name=None)
    assert updated.description == "changed" and forge.get(path).description == "changed"

    forge.delete(repo)
    assert forge.get(path) is None
    forge.delete(repo)  # gone already is fine


def test_create_in_an_organisation(gitea: Gitea, forge: GiteaForge):
    org = gitea.create_org()
    repo = forge.create(f"{org}/tenant-a", description="", display_name=None)
    assert repo.path == f"{org}/tenant-a"
    assert gitea.request("GET", f"/repos/{org}/tenant-a").json()["owner"]["login"] == org


def test_seed_deploy_keys_and_host_keys_over_real_ssh(gitea: Gitea, forge: GiteaForge, tmp_path: Path):
    repo = forge.create(f"{gitea.admin}/{unique('catalog')}", description="", display_name=None)
    files = {"README.md": "# catalog\n", "manifests/apps.yaml": "apps: []\n"}
    forge.seed(repo, files, "hubwright: first commit")
    assert forge.get(repo.path).empty is False

    # The host keys the adapter reads are the forge's own (the key file the harness made) ...
    lines = forge.host_keys(repo)
    assert lines == [gitea.known_hosts()]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("\n".join(lines) + "\n")

    agent, agent_pub = keypair(tmp_path, "agent")
    writer, writer_pub = keypair(tmp_path, "writer")
    stranger, _ = keypair(tmp_path, "stranger")
    read_key = forge.add_key(repo, "hubwright-agent", agent_pub, write=False)
    write_key = forge.add_key(repo, "ci", writer_pub, write=True)
    assert read_key.read_only is True and write_key.read_only is False
    assert read_key.key == " ".join(agent_pub.split()[:2])
    listed = {k.id: k for k in forge.keys(repo)}
    assert listed == {read_key.id: read_key, write_key.id: write_key}

    # ... and with strict host key checking on them, the read-only deploy key clones: one commit, the seed.
    port = gitea.ssh_port
    git("clone", repo.ssh_url, str(tmp_path / "clone"), key=agent, known_hosts=known_hosts, port=port)
    work = tmp_path / "clone"
    assert git("rev-list", "--count", "HEAD", cwd=work, key=agent, known_hosts=known_hosts,
               port=port).stdout.strip() == "1"
    assert git("log", "-1", "--format=%s", cwd=work, key=agent, known_hosts=known_hosts,
               port=port).stdout.strip() == "hubwright: first commit"
    assert {p: (work / p).read_text() for p in files} == files

    # It cannot push; the write key can.
    (work / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=work, key=agent, known_hosts=known_hosts, port=port)
    git("commit", "-qm", "x", cwd=work, key=agent, known_hosts=known_hosts, port=port)
    refused = git("push", "origin", "HEAD", cwd=work, key=agent, known_hosts=known_hosts, port=port, check=False)
    assert refused.returncode != 0, refused.stdout
    git("push", "origin", "HEAD", cwd=work, key=writer, known_hosts=known_hosts, port=port)

    # A key that is not a deploy key of this repository cannot clone it.
    other = git("clone", repo.ssh_url, str(tmp_path / "other"), key=stranger, known_hosts=known_hosts, port=port,
                check=False)
    assert other.returncode != 0 and not (tmp_path / "other" / "README.md").exists()

    # A removed key no longer clones; removing it twice is fine.
    forge.delete_key(repo, read_key.id)
    forge.delete_key(repo, read_key.id)
    assert [k.id for k in forge.keys(repo)] == [write_key.id]
    gone = git("clone", repo.ssh_url, str(tmp_path / "gone"), key=agent, known_hosts=known_hosts, port=port,
               check=False)
    assert gone.returncode != 0

    # Pinned host keys that are not the forge's: ssh refuses before any key is offered.
    known_hosts.write_text(f"[127.0.0.1]:{port} {agent_pub.split()[0]} {agent_pub.split()[1]}\n")
    spoofed = git("clone", repo.ssh_url, str(tmp_path / "spoofed"), key=writer, known_hosts=known_hosts, port=port,
                  check=False)
    assert spoofed.returncode != 0 and "host key" in spoofed.stderr.lower()


def test_a_token_without_the_scope_is_denied_naming_it(gitea: Gitea, forge: GiteaForge):
    repo = forge.create(f"{gitea.admin}/{unique('scoped')}", description="kept", display_name=None)
    token = gitea.make_token(gitea.admin, "read:user,read:repository")
    limited = forge_for("gitea", gitea.api, token, timeout=60)
    assert limited.check() == gitea.admin and limited.get(repo.path) == repo  # reading is allowed

    with pytest.raises(ForgeDenied) as denied:
        limited.add_key(repo, "k", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOOMZjJycgHxnbFkWDnVenG9Bw1LZclt4hDY+32I9h1l",
                        write=False)
    assert denied.value.scope == "write:repository" and "write:repository" in str(denied.value)
    with pytest.raises(ForgeDenied) as denied:
        limited.delete(repo)
    assert denied.value.scope == "write:repository"
    with pytest.raises(ForgeDenied) as denied:
        limited.create(f"{gitea.admin}/{unique('nope')}", description="", display_name=None)
    assert denied.value.scope == "write:user"
    assert token not in str(denied.value)
    assert forge.get(repo.path) == repo and forge.keys(repo) == []  # nothing changed


def test_a_refused_token_is_denied_without_showing_it(gitea: Gitea):
    bad = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(ForgeDenied) as denied:
        forge_for("gitea", gitea.api, bad, timeout=60).check()
    assert "401" in str(denied.value) and bad not in str(denied.value) and denied.value.scope is None


def test_a_name_already_taken_is_a_conflict_and_left_alone(gitea: Gitea, forge: GiteaForge):
    owner, token = gitea.create_user()
    org = gitea.create_org(token=token)  # someone else's organisation, where the admin's token may create too
    theirs = f"{org}/{unique('taken')}"
    gitea.request("POST", f"/orgs/{org}/repos", token=token,
                  json={"name": theirs.split("/")[1], "description": "someone else's", "auto_init": True})
    with pytest.raises(ForgeConflict) as conflict:
        forge.create(theirs, description="ours", display_name=None)
    assert "409" in str(conflict.value)
    kept = forge.get(theirs)
    assert kept.description == "someone else's" and kept.empty is False and forge.keys(kept) == []


def test_an_unknown_organisation_is_an_error_not_a_conflict(gitea: Gitea, forge: GiteaForge):
    with pytest.raises(ForgeError) as refused:
        forge.create(f"{unique('no-such-org')}/x", description="", display_name=None)
    assert not isinstance(refused.value, (ForgeConflict, ForgeDenied, ForgeUnavailable))
    assert "404" in str(refused.value)


def test_the_forge_down_is_unavailable_quickly_and_back_after_a_restart(fresh_gitea: Gitea):
    forge = forge_for("gitea", fresh_gitea.api, fresh_gitea.token, timeout=3)  # the timeout the down calls obey
    patient = forge_for("gitea", fresh_gitea.api, fresh_gitea.token, timeout=60)  # the calls while it is up
    repo = patient.create(f"{fresh_gitea.admin}/kept", description="", display_name=None)
    fresh_gitea.stop()
    for call in (forge.check, lambda: forge.get(repo.path), lambda: forge.keys(repo),
                 lambda: forge.create(f"{fresh_gitea.admin}/new", description="", display_name=None),
                 lambda: forge.host_keys(repo)):
        t0 = time.monotonic()
        with pytest.raises(ForgeUnavailable):
            call()
        assert time.monotonic() - t0 < 3 + 5  # refused at once; never longer than the timeout (+ slack)
    fresh_gitea.start()
    assert patient.get(repo.path) == repo and patient.host_keys(repo) == [fresh_gitea.known_hosts()]


def test_a_forge_that_never_answers_is_unavailable_within_the_timeout():
    """Something accepts the connection and says nothing (a hung forge): the call gives up at its timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def hold():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        forge = forge_for("gitea", f"http://127.0.0.1:{listener.getsockname()[1]}/api/v1", "t" * 40, timeout=1)
        t0 = time.monotonic()
        with pytest.raises(ForgeUnavailable) as unavailable:
            forge.check()
        took = time.monotonic() - t0
        assert 0.9 <= took < 10, took
        assert "no answer within 1s" in str(unavailable.value)
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in accepted:
            conn.close()


def test_a_missing_gitea_fails_the_test_naming_the_script_never_skips(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(tests.gitea, "BINARY", tmp_path / "no-gitea")
    with pytest.raises(pytest.fail.Exception, match=r"run scripts/tools.sh, which builds Gitea v1\.26\.0"):
        Gitea(tmp_path)
