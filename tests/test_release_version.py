"""The version is written in one place, pyproject.toml's project.version (stacks.release.version()): the chart's
version and appVersion, the image's tag and labels, the zipapp's name and the policy pack all come from it."""
from __future__ import annotations

import re

import yaml

from doubles.envtest import ROOT
from stacks.release import default_image, version

# Where our own files may not write the version a second time (third-party versions in tools/ are theirs).
OURS = ("stacks/", "components/", "automation/", "policy/", "scripts/", "deploy/", ".github/", "Dockerfile",
        "Makefile", "Pulumi.yaml", "__main__.py", "requirements.txt")
GENERATED = ("deploy/helm/hubwright/",)  # install --chart writes it from version(); tests/test_chart.py checks it


def test_no_file_of_ours_writes_the_version_again() -> None:
    files = [p.relative_to(ROOT).as_posix() for top in OURS for p in ([ROOT / top] if (ROOT / top).is_file()
             else (ROOT / top).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    pattern = re.compile(rf"(?<![\d.]){re.escape(version())}(?![\d.])")
    again = [name for name in files
             if not name.startswith(GENERATED)
             and pattern.search((ROOT / name).read_text(encoding="utf-8", errors="replace"))]
    assert not again, f"the version {version()} is written again in {again}: read it from stacks.release.version()"


def test_the_chart_carries_the_one_version() -> None:
    meta = yaml.safe_load((ROOT / "deploy" / "helm" / "hubwright" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "hubwright" / "values.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == version()
    assert values["image"] == default_image()
