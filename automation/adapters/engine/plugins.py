"""Whether this `serve` can run AWS stacks: the one readiness rule for the AWS provider plugin.

The plugin is an input of the image build (scripts/image.sh --aws-plugin, the Dockerfile's PULUMI_AWS_SHA256), not
a download at run time: every image sets PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true, so a missing plugin is
never fetched, unverified, by the first `up`. The build records what it put in at IMAGE_AWS_PLUGIN
(stacks.release): the plugin's SHA-256, or "none" for an image built without it (tagged `<version>-noplugin`).

In such an image (or one whose recorded plugin is not on PATH) /readyz answers 503 with the reason, at start and
for as long as it runs: a Deployment of it never becomes Available, rather than failing each AWS stack's run later.
Run from a checkout (no record) nothing is checked here: the pulumi CLI names a missing plugin on the run that
needs it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from stacks import release


def aws_plugin_problem(record: Path | str = release.IMAGE_AWS_PLUGIN, path: str | None = None) -> str | None:
    """Why this process cannot run AWS stacks, or None. `path`: the PATH to look on (default: the process's)."""
    try:
        recorded = Path(record).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None  # not an image build: nothing recorded, nothing to check
    found = shutil.which(release.AWS_PLUGIN, path=path)
    if recorded != release.NO_AWS_PLUGIN and found:
        return None
    if recorded == release.NO_AWS_PLUGIN:
        why = f"this image was built without it ({release.image_tag(with_plugin=False)})"
    else:
        why = f"this image recorded it (sha256 {recorded}) but it is not on PATH"
    return (f"the AWS provider plugin {release.AWS_PLUGIN} is missing: {why}, and the pulumi CLI does not download "
            f"plugins here (PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true): run {release.image_tag(with_plugin=True)}, "
            f"built with scripts/image.sh --aws-plugin <path or URL> --aws-plugin-sha256 <sum>")
