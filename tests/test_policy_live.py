"""The policy pack loaded by the real engine: the built `pulumi` CLI runs policy/ (through
pulumi-analyzer-policy-python, scripts/tools.sh) on PulumiEngine's up and preview, over a program whose dynamic
resource imitates an endpoint service (doubles/pulumi_programs.py). Skips, saying why, without the CLI."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from automation.adapters.engine import PolicyViolation
from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.engine.run_output import policy_violations
from doubles.pulumi_programs import PACK, TOOLS_BIN, endpoint_service, engine_settings, make_inputs

NEEDS = ("pulumi", "pulumi-resource-pulumi-python", "pulumi-analyzer-policy-python")
MISSING = [b for b in NEEDS if not (TOOLS_BIN / b).is_file() and shutil.which(b) is None]
pytestmark = [pytest.mark.live,
              pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not found: run scripts/tools.sh")]

HUB_ROLE = "arn:aws:iam::111111111111:role/hubwright-hub"  # make_inputs' hub account


def engine(tmp_path: Path, principal: str, marker: Path, **policy: str) -> PulumiEngine:
    settings = dataclasses.replace(engine_settings(tmp_path / "state", policy=PACK), **policy)
    return PulumiEngine(settings, program_factory=lambda inputs: endpoint_service(inputs, principal=principal,
                                                                                  marker=str(marker)))


def test_the_engine_refuses_a_wildcard_principal_and_creates_nothing(tmp_path):
    marker = tmp_path / "created"
    with pytest.raises(PolicyViolation) as refused:
        engine(tmp_path, "*", marker).up(make_inputs(), message="policy test")
    assert refused.value.reason == "PolicyViolation"
    text = str(refused.value)
    assert "endpoint-service-one-hub-principal" in text and "principal '*' is a wildcard" in text
    assert not marker.exists()  # refused before the resource was created


def test_a_principal_of_the_hub_account_passes_the_same_pack(tmp_path):
    marker = tmp_path / "created"
    result = engine(tmp_path, HUB_ROLE, marker).up(make_inputs(), message="policy test")
    assert result.ok and marker.read_text() == "prod-1-svc"
    config = json.loads(next((tmp_path / "state" / "policy").glob("config-*.json")).read_text())
    assert config["endpoint-service-one-hub-principal"] == {"enforcementLevel": "mandatory"}


def test_the_preview_refuses_it_too(tmp_path):
    good = engine(tmp_path, HUB_ROLE, tmp_path / "created")
    good.up(make_inputs(), message="policy test")
    with pytest.raises(PolicyViolation, match="endpoint-service-one-hub-principal"):
        engine(tmp_path, "arn:aws:iam::999999999999:root", tmp_path / "again").preview(make_inputs())


def test_advisory_reports_and_lets_it_through_and_off_is_the_emergency_switch(tmp_path):
    for level in ("advisory", "off"):
        marker = tmp_path / f"{level}.created"
        result = engine(tmp_path / level, "*", marker, policy=level).up(make_inputs(), message=f"policy {level}")
        assert result.ok and marker.exists(), level
        assert ("policy (advisory): endpoint-service-one-hub-principal" in result.message) == (level == "advisory")


def test_the_pack_config_turns_one_rule_down(tmp_path):
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"endpoint-service-one-hub-principal": "advisory"}))
    result = engine(tmp_path, "*", tmp_path / "created", policy_config=str(config)).up(make_inputs(), message="t")
    assert result.ok


def test_a_bad_policy_setting_is_refused_at_start_naming_the_variable(tmp_path):
    with pytest.raises(ValueError, match="HUBWRIGHT_POLICY.*'sometimes'"):
        engine(tmp_path, HUB_ROLE, tmp_path / "x", policy="sometimes")


def test_violations_are_read_from_the_clis_output():
    out = ("Policies:\n    ❌ hubwright@v0.1.0 (local: policy)\n"
           "        - [mandatory]  endpoint-service-one-hub-principal  (pulumi-python:dynamic/ec2:VpcEndpointService: "
           "prod-1-svc)\n          An endpoint service allows exactly one principal.\n"
           "          principal '*' is a wildcard\n"
           "        - [advisory]  no-world-open-rule  (x: y)\n          not this one\n")
    assert policy_violations(out) == ("endpoint-service-one-hub-principal (pulumi-python:dynamic/ec2:"
                                      "VpcEndpointService: prod-1-svc): An endpoint service allows exactly one "
                                      "principal. principal '*' is a wildcard")
    assert policy_violations(out, level="advisory") == "no-world-open-rule (x: y): not this one"
    assert policy_violations("error: update failed") == ""
