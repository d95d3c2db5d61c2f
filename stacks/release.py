"""The release: its one version (pyproject.toml's `project.version`) and the image it ships as.

Everything that shows or uses a version reads it here: `python -m automation --version`, the image's labels,
the default image of the service and of a cluster's facts agent (`<registry>/<name>:<version>`, never a moving
tag; a digest, `<registry>/<name>@sha256:...`, is a documented value of the install).
"""
from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

NAME = "hubwright"
IMAGE_REPOSITORY = f"ghcr.io/{NAME}/{NAME}"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@cache
def version() -> str:
    """The project's version, from pyproject.toml (shipped in the image beside the code)."""
    with open(PYPROJECT, "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def default_image() -> str:
    """The project's own image at this release: what the install deploys and what a facts agent runs."""
    return f"{IMAGE_REPOSITORY}:{version()}"
