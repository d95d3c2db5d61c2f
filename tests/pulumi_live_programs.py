"""The live Pulumi tests' fixture: ``pulumi_cli`` (registered in tests/conftest.py). The programs, their inputs
and settings are in doubles/pulumi_programs.py, which bench/ shares."""
from __future__ import annotations

import os
import shutil

import pytest

from doubles.pulumi_programs import TOOLS_BIN


@pytest.fixture(scope="module")
def pulumi_cli():
    """PATH with .tools/bin first (when present); skip when the CLI or the dynamic provider is missing."""
    with pytest.MonkeyPatch.context() as mp:
        if TOOLS_BIN.is_dir():
            mp.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        cli = shutil.which("pulumi")
        if cli is None:
            pytest.skip("pulumi CLI not found in .tools/bin or on PATH: run scripts/tools.sh")
        if shutil.which("pulumi-resource-pulumi-python") is None:
            pytest.skip("pulumi-resource-pulumi-python (dynamic providers) not found: run scripts/tools.sh")
        yield cli
