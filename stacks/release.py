"""The release: its one version (pyproject.toml's `project.version`) and the image it ships as.

Everything that shows or uses a version reads it here: `python -m automation --version`, the registry API's
/version and OpenAPI document, the image's labels (`make image` passes `VERSION`), the default image of the service
and of a cluster's facts agent (`<registry>/<name>:<version>`, never a moving tag; a digest,
`<registry>/<name>@sha256:...`, is a documented value of the install).

`image_problem` is the one rule for an image we are told to run: pinned (a version tag or a digest) and ours.

The AWS provider plugin is an input of the image build (scripts/image.sh --aws-plugin, the Dockerfile's
PULUMI_AWS_SHA256): an image built without it is tagged `image_tag(with_plugin=False)` (`<version>-noplugin`),
carries AWS_PLUGIN_LABEL = "none", and its `serve` reports not ready (automation.adapters.engine.plugins).
"""
from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

NAME = "hubwright"
IMAGE_REPOSITORY = f"ghcr.io/{NAME}/{NAME}"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# An image reference as the container runtimes read it (the distribution/reference grammar):
# [registry[:port]/]path[:tag][@sha256:<64 hex>]; the digest must be a SHA-256 (the one every registry serves).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
IMAGE_REFERENCE = re.compile(rf"^(?:{_DOMAIN}/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
                             rf"(?::(?P<tag>\w[\w.-]{{0,127}}))?(?:@(?P<digest>sha256:[0-9a-f]{{64}}))?$")
MOVING_TAGS = frozenset({"latest"})  # what a registry moves on every push; no tag at all means `latest`


@cache
def version() -> str:
    """The project's version, from pyproject.toml (shipped in the image beside the code)."""
    with open(PYPROJECT, "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def default_image() -> str:
    """The project's own image at this release: what the install deploys and what a facts agent runs."""
    return f"{IMAGE_REPOSITORY}:{version()}"


NOPLUGIN_SUFFIX = "-noplugin"  # the tag of an image built without the AWS provider plugin
AWS_PLUGIN = "pulumi-resource-aws"  # the provider plugin's executable, on the image's PATH (/usr/local/bin)
AWS_PLUGIN_LABEL = f"io.{NAME}.aws-plugin.sha256"  # the plugin's SHA-256 as given to the build, or NO_AWS_PLUGIN
NO_AWS_PLUGIN = "none"
# What the build put in, inside the image (the label's value): `serve` reads it for /readyz
# (automation.adapters.engine.plugins). Absent outside an image.
IMAGE_AWS_PLUGIN = f"/usr/local/share/{NAME}/aws-plugin.sha256"


def image_tag(with_plugin: bool) -> str:
    """The image an image build makes: default_image() with the AWS provider plugin, `<it>-noplugin` without."""
    return default_image() if with_plugin else f"{default_image()}{NOPLUGIN_SUFFIX}"


def image_problem(image: str) -> str | None:
    """Why `image` may not be run as hubwright's image, or None.

    Pinned: a digest, or a tag other than a moving one (a moving tag runs whatever was pushed last, on every node
    that pulls it). Ours: the repository's last part is `hubwright`, on any registry or mirror (ghcr.io, ECR, a
    pull-through cache keep it), so another project's image is never run with our agent's rights.
    """
    found = IMAGE_REFERENCE.match(image)
    if found is None:
        return (f"{image!r} is not an image reference ([registry/]path[:tag][@sha256:<64 hex>], lowercase path); "
                f"the default is {default_image()}")
    name = found["path"].rsplit("/", 1)[-1]
    if name != NAME:
        return (f"{image} is not {NAME}'s image (its name is {name!r}, not {NAME!r}): mirror {IMAGE_REPOSITORY} "
                f"under the name {NAME}; the default is {default_image()}")
    if found["digest"] is None and (found["tag"] or "latest") in MOVING_TAGS:
        return (f"{image} has a moving tag ({found['tag'] or 'none, which means latest'}): pin this release "
                f"({default_image()}) or a digest (<repository>@sha256:<64 hex>)")
    return None
