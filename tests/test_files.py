"""Bad input files through the real CLI: exit 2 naming the file and the reason, never a traceback or a hang."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from automation.cli import main
from automation.adapters.files import inputs as files
from automation.adapters.files.inputs import LOADERS, MAX_FILE_BYTES, load_fleet
from stacks.errors import InvalidSpec
from doubles.factories import cluster_doc, hub_doc, namespace_doc


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    """A valid hub and one valid cluster (with its tenant) to put bad files beside."""
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc()))
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "good.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), cluster_doc("good")]))
    return tmp_path


def plan(capsys, root: Path, clusters: Path | None = None, hub: Path | None = None) -> tuple[int, str]:
    code = main(["plan", "--hub", str(hub or root / "hub.yaml"), "--clusters", str(clusters or root / "clusters")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def refused(capsys, root: Path, path: Path, reason: str, **kw) -> None:
    """Exit 2, and the file (or folder) itself is the object named: no placeholder such as "(file)" or "(path)"."""
    code, err = plan(capsys, root, **kw)
    assert code == 2, err
    assert f"{path}: {reason}" in err, err
    assert "(file)" not in err and "(path)" not in err, err


BAD = {
    "not UTF-8": (b"kind: HubCluster\nmetadata: {name: \xff\xfe}\n", "not UTF-8 (byte 0xff at offset 34)"),
    "5,000-digit integer": (b"kind: HubCluster\nspec: {replicas: " + b"9" * 5000 + b"}\n",
                            "a number longer than 100 characters"),
    "sexagesimal integer": (b"a: 1" + b":1" * 200_000 + b"\n", "a number longer than 100 characters"),  # minutes
    "a date that does not exist": (b"a: 2024-13-45\n", "a value YAML cannot read: month must be in 1..12"),
    "5,000-deep nesting": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested deeper than 64 levels"),
    "65-deep nesting": (b"a: " + b"[" * 65 + b"]" * 65 + b"\n", "nested deeper than 64 levels"),
    "not YAML": (b"kind: [unclosed\n", "not valid YAML"),
    "a list, not an object": (b"- a\n- b\n", "document 1 is a list, not a Kubernetes object"),
    "a scalar, not an object": (b"kind: HubCluster\n---\njust words\n", "document 2 is a str, not a Kubernetes object"),
    "an alias inside itself": (b"a: &a [*a]\n", "a YAML alias inside the value it names"),
    "aliases nested too deep": (b"a: &a " + b"[" * 40 + b"]" * 40 + b"\nb: " + b"[" * 30 + b"*a" + b"]" * 30 + b"\n",
                                "nested deeper than 64 levels"),
    "a Python object tag": (b"!!python/object/apply:os.system ['true']\n", "not valid YAML"),
}


@pytest.fixture(params=["as shipped", *LOADERS], ids=lambda loader: getattr(loader, "__name__", loader))
def loader(request, monkeypatch) -> type | str:
    """Each way files.py may read: as shipped (libyaml end to end for the files its events show to be plain,
    else libyaml's parser under the measuring composer), and each measuring loader alone."""
    if request.param != "as shipped":
        monkeypatch.setattr(files, "LOADERS", (request.param,))
    return request.param


def test_libyaml_parses_where_pyyaml_has_it():
    assert LOADERS[0].__name__ == ("_BoundedCLoader" if yaml.__with_libyaml__ else "_BoundedLoader")


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_refused_naming_it(capsys, fleet_dir, case, loader):
    content, reason = BAD[case]
    bad = fleet_dir / "clusters" / "bad.yaml"
    bad.write_bytes(content)
    refused(capsys, fleet_dir, bad, reason)


BOMBS = {  # 10**10 values once expanded; the merge keys' copies used to hang PyYAML's own loading
    "aliases": ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
               + [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 10)],
    "merge keys": ["a0: &a0 {k0: x}"]
                  + [f"a{i}: &a{i} {{<<: [{', '.join(f'*a{i - 1}' for _ in range(10))}], k{i}: y}}" for i in range(1, 10)],
}


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_an_alias_bomb_is_refused_at_once(capsys, fleet_dir, kind, loader):
    bomb = fleet_dir / "clusters" / "bomb.yaml"
    bomb.write_text("\n".join(BOMBS[kind]) + "\n")
    started = time.monotonic()
    refused(capsys, fleet_dir, bomb, "more than 100,000 values once YAML aliases are expanded")
    assert time.monotonic() - started < 1


def test_a_file_over_the_size_limit_is_refused_without_reading_it_all(capsys, fleet_dir):
    big = fleet_dir / "clusters" / "big.yaml"
    big.write_bytes(b"# " + b"x" * MAX_FILE_BYTES + b"\n")
    refused(capsys, fleet_dir, big, "larger than 1 MiB")


def test_broken_links_and_link_loops_are_refused(capsys, fleet_dir):
    folder = fleet_dir / "clusters"
    (folder / "broken.yaml").symlink_to(folder / "gone.yaml")
    (folder / "loop.yaml").symlink_to(folder / "loop.yaml")
    code, err = plan(capsys, fleet_dir)
    assert code == 2
    assert f"{folder / 'broken.yaml'}: a symbolic link that points nowhere" in err
    assert f"{folder / 'loop.yaml'}: a symbolic link loop" in err


@pytest.mark.live
def test_a_fifo_is_skipped_unopened_and_the_plan_does_not_hang(fleet_dir):
    os.mkfifo(fleet_dir / "clusters" / "pipe.yaml")
    # A hang never ends; a plan on a loaded machine took more than 30 s.
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", str(fleet_dir / "hub.yaml"),
                           "--clusters", str(fleet_dir / "clusters")], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "stack acme.good" in done.stdout  # the valid file beside it still planned


def test_a_valid_file_beside_a_fifo_still_loads(fleet_dir):
    os.mkfifo(fleet_dir / "clusters" / "pipe.yaml")
    fleet = load_fleet(str(fleet_dir / "hub.yaml"), str(fleet_dir / "clusters"))
    assert [c.key for c in fleet.clusters] == ["acme/good"]


def test_a_fifo_given_as_the_hub_is_refused_unopened(capsys, fleet_dir):
    pipe = fleet_dir / "pipe.yaml"
    os.mkfifo(pipe)
    refused(capsys, fleet_dir, pipe, "not a regular file or a folder", hub=pipe)


def test_the_hub_file_gets_the_same_protections(capsys, fleet_dir):
    hub = fleet_dir / "hub.yaml"
    hub.write_bytes(b"\xff")
    refused(capsys, fleet_dir, hub, "not UTF-8", hub=hub)
    hub.unlink()
    hub.symlink_to(hub)
    refused(capsys, fleet_dir, hub, "a symbolic link loop", hub=hub)


def test_an_empty_folder_or_one_without_clusters_is_an_error(capsys, fleet_dir):
    empty = fleet_dir / "empty"
    empty.mkdir()
    refused(capsys, fleet_dir, empty, "no YAML files (*.yaml, *.yml) there", clusters=empty)
    (empty / "ns.yaml").write_text(yaml.safe_dump(namespace_doc("acme")))
    refused(capsys, fleet_dir, empty, "no Cluster objects there", clusters=empty)
    refused(capsys, fleet_dir, fleet_dir / "missing", "no such file or folder",
            clusters=fleet_dir / "missing")


@pytest.mark.parametrize("command", ["inputs", "ingress render"])
def test_inputs_and_ingress_render_refuse_an_empty_folder_too(capsys, fleet_dir, command):
    empty = fleet_dir / "empty"
    empty.mkdir()
    extra = ["--cluster", "acme/good"] if command == "inputs" else ["--out", str(fleet_dir / "out")]
    code = main([*command.split(), "--hub", str(fleet_dir / "hub.yaml"), "--clusters", str(empty), *extra])
    err = capsys.readouterr().err
    assert code == 2 and f"{empty}: no YAML files (*.yaml, *.yml) there" in err, err
    assert "Traceback" not in err


def test_ingress_render_refuses_an_out_path_that_is_a_file(capsys, fleet_dir):
    out = fleet_dir / "out"
    out.write_text("not a folder")
    code = main(["ingress", "render", "--hub", str(fleet_dir / "hub.yaml"), "--clusters",
                 str(fleet_dir / "clusters"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"--out {out}: a file, not a folder" in err


def test_every_problem_of_every_file_is_reported_at_once(fleet_dir):
    folder = fleet_dir / "clusters"
    (folder / "a.yaml").write_text(yaml.safe_dump(cluster_doc("a", accountID="1")))
    (folder / "b.yaml").write_text("kind: [unclosed")
    with pytest.raises(InvalidSpec) as caught:
        load_fleet(str(fleet_dir / "hub.yaml"), str(folder))
    text = str(caught.value)
    assert "HubCluster acme/a" in text and "spec.accountID" in text
    assert f"{folder / 'b.yaml'}: not valid YAML" in text


@pytest.mark.parametrize("content, expected", [
    (b"kind: [a]\n", "expected HubConfig, HubCluster or Namespace, got ['a']"),
    (b"kind: HubCluster\nmetadata: {name: a, namespace: 5}\n", "metadata.namespace"),
    (b"kind: HubCluster\nmetadata: {namespace: [x]}\n", "metadata.namespace"),
])
def test_well_formed_yaml_of_the_wrong_shape_is_refused_not_a_traceback(capsys, fleet_dir, content, expected):
    bad = fleet_dir / "clusters" / "bad.yaml"
    bad.write_bytes(content)
    code, err = plan(capsys, fleet_dir)
    assert code == 2 and expected in err and f"({bad})" in err, err


def test_both_loaders_read_every_example_alike():
    """The fast loader is a drop-in: each bundled file loads to the same objects as with the pure-Python one."""
    paths = sorted(Path("examples").rglob("*.yaml"))
    assert paths
    for path in paths:
        text = path.read_text()
        assert [list(yaml.load_all(text, Loader=loader)) for loader in LOADERS] == \
            [list(yaml.load_all(text, Loader=LOADERS[-1]))] * len(LOADERS), path
