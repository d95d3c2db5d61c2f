"""scripts/crds.sh and doubles.thirdparty: other projects' CRDs are what modules.txt pins, or a loud error.

scripts/crds.sh runs from a copy of the repository's scripts and table in a temporary root (so .tools/crds of the
checkout is not touched), with the module cache scripts/tools.sh filled: nothing is fetched again.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import doubles.thirdparty as thirdparty

ROOT = Path(__file__).resolve().parent.parent


def crds_sh(root: Path, table: str) -> subprocess.CompletedProcess:
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    (root / "tools" / "crds").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "scripts" / "crds.sh", root / "scripts" / "crds.sh")
    shutil.copytree(ROOT / "scripts" / "lib", root / "scripts" / "lib", dirs_exist_ok=True)  # cache.sh, sourced
    (root / "tools" / "crds" / "modules.txt").write_text(table)
    env = dict(os.environ, PATH=f"{os.environ.get('PATH', '')}:/usr/local/go/bin")
    return subprocess.run(["bash", str(root / "scripts" / "crds.sh")], capture_output=True, text=True,
                          env=env, timeout=300)


def pinned_line(project: str) -> str:
    m = thirdparty.modules()[project]
    return f"{m.project} {m.module} {m.version} {m.sum} {','.join(m.files)}\n"


@pytest.mark.live
def test_a_pinned_module_is_extracted_with_its_stamp(tmp_path):
    done = crds_sh(tmp_path, pinned_line("lieutenant"))
    assert done.returncode == 0, done.stderr
    where = tmp_path / ".tools" / "crds" / "lieutenant"
    assert sorted(p.name for p in where.glob("*.yaml")) == sorted(p.name for p in thirdparty.crd_files("lieutenant"))
    assert (where / ".source").read_text().strip() == thirdparty.modules()["lieutenant"].source


@pytest.mark.live
def test_a_module_whose_hash_is_not_the_pinned_one_fails_and_installs_nothing(tmp_path):
    line = pinned_line("lieutenant").replace(thirdparty.modules()["lieutenant"].sum,
                                             "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    done = crds_sh(tmp_path, line)
    assert done.returncode != 0
    assert "has hash 'h1:" in done.stderr and "pins 'h1:AAAA" in done.stderr
    assert not (tmp_path / ".tools" / "crds" / "lieutenant").exists()


@pytest.mark.live
def test_a_path_with_no_crd_in_the_module_fails(tmp_path):
    line = pinned_line("lieutenant").replace("config/crd/bases/*.yaml", "config/nowhere/*.yaml")
    done = crds_sh(tmp_path, line)
    assert done.returncode != 0 and "matches config/nowhere/*.yaml" in done.stderr


def test_crd_files_names_the_script_when_missing_or_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(thirdparty, "CRDS_DIR", tmp_path)
    with pytest.raises(thirdparty.MissingCRDs, match="run scripts/crds.sh"):
        thirdparty.crd_files("cluster-api")
    (tmp_path / "cluster-api").mkdir()
    (tmp_path / "cluster-api" / ".source").write_text("sigs.k8s.io/cluster-api@v1.0.0 h1:old= x/*.yaml\n")
    with pytest.raises(thirdparty.MissingCRDs, match=r"from sigs.k8s.io/cluster-api@v1.0.0, not the pinned .*scripts/crds.sh"):
        thirdparty.crd_files("cluster-api")
    with pytest.raises(KeyError, match="known: cluster-api"):
        thirdparty.crd_files("no-such-project")


def test_the_prometheus_operators_monitoring_crds_are_there_for_the_install():
    kinds = {c["spec"]["names"]["kind"]: c for c in thirdparty.crds("prometheus-operator")}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert kinds[kind]["apiVersion"] == "apiextensions.k8s.io/v1"
        assert kinds[kind]["spec"]["group"] == "monitoring.coreos.com"
