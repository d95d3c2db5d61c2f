"""The image's AWS provider plugin is an input: an image built without it is tagged `<version>-noplugin`, and its
`serve` answers /readyz with 503 and the reason (automation/adapters/engine/plugins.py), follower or leader.
The image itself is built and run by tests/test_image_live.py."""
from __future__ import annotations

import json
import types

from automation.adapters.engine.plugins import aws_plugin_problem
from automation.service.serve import Service
from stacks import release


def test_the_tags_with_and_without_the_plugin():
    assert release.image_tag(with_plugin=True) == release.default_image() == \
        f"ghcr.io/hubwright/hubwright:{release.version()}"
    assert release.image_tag(with_plugin=False) == f"{release.default_image()}-noplugin"
    assert release.image_problem(release.image_tag(with_plugin=False)) is None  # pinned, ours


def test_outside_an_image_nothing_is_checked(tmp_path):
    assert aws_plugin_problem(tmp_path / "absent", path=str(tmp_path)) is None


def test_an_image_built_without_the_plugin_is_not_ready_naming_the_plugin_and_the_tag(tmp_path):
    record = tmp_path / "aws-plugin.sha256"
    record.write_text("none\n")
    problem = aws_plugin_problem(record, path=str(tmp_path))
    assert problem and release.AWS_PLUGIN in problem and release.image_tag(with_plugin=False) in problem
    assert "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION" in problem and "--aws-plugin" in problem


def test_an_image_with_the_plugin_on_path_is_ready_and_a_recorded_one_gone_is_not(tmp_path):
    record = tmp_path / "aws-plugin.sha256"
    record.write_text("ab" * 32 + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gone = aws_plugin_problem(record, path=str(bin_dir))
    assert gone and "ab" * 32 in gone and "not on PATH" in gone
    plugin = bin_dir / release.AWS_PLUGIN
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    assert aws_plugin_problem(record, path=str(bin_dir)) is None


def test_readyz_answers_not_ready_with_the_reason_before_anything_else():
    """Service.ready, the /readyz body (automation/adapters/probes.py serves it as JSON, 503 when not ok)."""
    follower = types.SimpleNamespace(not_ready="the AWS provider plugin pulumi-resource-aws is missing",
                                     elector=types.SimpleNamespace(is_leader=False, holder="other"), pipeline=None)
    ok, detail = Service.ready(follower)
    assert not ok and detail == {"problem": follower.not_ready}
    json.dumps(detail)
    follower.not_ready = None
    assert Service.ready(follower)[0]  # a follower is otherwise ready


def test_a_runner_without_the_plugin_claims_nothing_and_is_not_ready():
    """A run a plugin-less runner claimed would only fail: it leaves every run to a runner that can run it."""
    from kubernetes import client

    from automation.runner.runner import MAX_WAKE, Runner
    from doubles.engine import RecordingEngine

    problem = "the AWS provider plugin pulumi-resource-aws is missing"
    runner = Runner(client.ApiClient(), RecordingEngine(), namespace="hubwright-system", not_ready=problem)
    runner._views = lambda: (_ for _ in ()).throw(AssertionError("a plugin-less runner looked for runs to claim"))
    assert runner.pick() == MAX_WAKE
    assert runner.ready() == (False, {"problem": problem})
