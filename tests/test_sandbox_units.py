"""The sandbox's rules in-process (tests/test_sandbox.py runs the command for real): where its folder is and which
folder it will touch, the lock that says one runs, the `export` lines, where binaries are looked for and what a
missing one says, when its AWS is refused, and the command line's refusals that start nothing."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from automation.cli import main
from automation.sandbox import aws, supervisor, tools
from automation.sandbox.folder import MARKER, Folder, NotOurs, default_dir, env_lines


def test_the_folder_defaults_to_the_users_state_home_never_the_current_directory(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_dir() == tmp_path / "state" / "hubwright" / "sandbox"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_dir() == tmp_path / "home" / ".local" / "state" / "hubwright" / "sandbox"
    monkeypatch.chdir(tmp_path)
    assert Folder(Path("relative")).path == tmp_path / "relative"  # --dir as given is made absolute, once


def test_only_a_marked_folder_is_used_emptied_or_removed(tmp_path: Path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(NotOurs, match="is not a sandbox's folder"):
        Folder(foreign).prepare()
    Folder(foreign).remove()
    assert (foreign / "notes.txt").read_text() == "keep me"

    empty = tmp_path / "empty"
    empty.mkdir()
    folder = Folder(empty)
    folder.prepare()  # an empty folder is taken, and marked
    assert (empty / MARKER).is_file()
    (empty / "apiserver").mkdir()
    (empty / "env").write_text("export A=1\n")
    folder.clear()
    assert sorted(p.name for p in empty.iterdir()) == [MARKER]
    folder.remove()
    assert not empty.exists()


def test_the_lock_says_a_supervisor_runs(tmp_path: Path):
    folder = Folder(tmp_path / "sandbox")
    folder.prepare()
    assert not folder.running()
    held = folder.lock()
    assert held is not None
    try:
        assert folder.running()
        assert folder.lock() is None  # a second supervisor is refused
    finally:
        os.close(held)
    assert not folder.running()


def test_export_lines_survive_a_shell():
    env = {"KUBECONFIG": "/a path/with 'quotes'/kubeconfig", "FORGE_TOKEN": "0123abc", "EMPTY": "", "X": "$(no)"}
    text = env_lines(env)
    read = {}
    for line in text.splitlines():
        word, assignment = shlex.split(line)
        assert word == "export"
        name, _, value = assignment.partition("=")
        read[name] = value
    assert read == env


def test_binaries_are_looked_for_in_kubebuilder_assets_first(monkeypatch, tmp_path: Path):
    for name in ("etcd", "openssl"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert tools.find_binary("etcd") == str(tmp_path / "etcd")
    assert tools.find_binary("openssl") != str(tmp_path / "openssl")  # the system's, from PATH only
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr(tools, "CHECKOUT", tmp_path / "not-a-checkout")
    with pytest.raises(tools.MissingBinaries) as missing:
        tools.require("etcd", "kube-apiserver", "openssl")
    assert missing.value.names == ["kube-apiserver", "openssl"]


def test_a_missing_binary_says_where_to_get_it_in_one_line(monkeypatch, tmp_path: Path):
    in_checkout = tools.missing_message(["etcd", "kube-controller-manager"])
    assert "\n" not in in_checkout
    assert in_checkout.startswith(f"etcd, kube-controller-manager not found in $KUBEBUILDER_ASSETS, "
                                  f"{tools.CHECKOUT / '.tools' / 'bin'} or PATH: run scripts/tools.sh")
    monkeypatch.setattr(tools, "CHECKOUT", tmp_path)  # no pyproject.toml, no scripts/tools.sh: not a checkout
    outside = tools.missing_message(["etcd", "kube-apiserver", "kube-controller-manager", "openssl"])
    assert "\n" not in outside and "scripts/tools.sh" not in outside
    assert outside.startswith("etcd, kube-apiserver, kube-controller-manager, openssl not found in "
                              "$KUBEBUILDER_ASSETS or PATH: etcd, kube-apiserver from controller-runtime's "
                              "setup-envtest")
    assert "dl.k8s.io" in outside and "apt-get install openssl" in outside
    assert tools.missing_message(["openssl"]).startswith("openssl not found in PATH: ")


def test_without_moto_the_sandbox_goes_on_without_aws_unless_a_fleet_asks(monkeypatch):
    monkeypatch.setattr(aws, "moto_installed", lambda: False)
    assert supervisor.check_aws(None) is False
    with pytest.raises(aws.MotoMissing, match=r"needs moto\[server\]: pip install -r requirements-dev.txt"):
        supervisor.check_aws(Path("examples/clusters"))


def test_the_command_line_refuses_before_starting_anything(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["sandbox", "up", "--dir", str(tmp_path / "s"), "--fleet", "examples/clusters"])
    assert exited.value.code == 2 and "--fleet and --hub go together" in capsys.readouterr().err
    assert main(["sandbox", "down", "--dir", str(tmp_path / "s")]) == 0
    assert "nothing to stop" in capsys.readouterr().err
    assert main(["sandbox", "env", "--dir", str(tmp_path / "s")]) == 1
    assert "no sandbox running" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file").write_text("x")
    assert main(["sandbox", "down", "--dir", str(tmp_path / "other")]) == 1
    assert (tmp_path / "other" / "file").exists()
    assert not (tmp_path / "s").exists()
