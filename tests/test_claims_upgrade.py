"""The upgrade to recorded claims (issue #45): a fleet resolved by the code before claims were recorded, then by
this code, keeps every holder and every stack.

tests/recorded/upgrade_claims/answers.json is what the code before (commit c2fafd8) answered for fleet.yaml, made by
running `answers()` below there. This code must answer the same for every cluster (each admitted stack's inputs
digest, each refusal's reason), then, once the service recorded what admission granted (status.claims), the same
again: recording changes no owner and no stack.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent / "recorded" / "upgrade_claims"


def fleet_docs() -> tuple[dict, list[dict]]:
    hub, *clusters = [d for d in yaml.safe_load_all((HERE / "fleet.yaml").read_text()) if d]
    return hub, clusters


def answers(hub: dict, clusters: list[dict]) -> dict[str, Any]:
    """Each cluster's answer: its inputs' digest when admitted, else its refusal's reason."""
    from doubles.factories import fleet
    from stacks.inputs import StackInputs
    from stacks.model.loading import parse
    from stacks.resolve import resolve_all

    resolved = resolve_all(fleet(parse(hub), [parse(c) for c in clusters], discovery=True))
    return {key: {"digest": value.digest()} if isinstance(value, StackInputs) else {"refused": value.reason}
            for key, value in sorted(resolved.inputs.items())}


def test_the_first_resolve_after_the_upgrade_answers_as_the_code_before_did_then_recording_changes_nothing():
    from doubles.factories import fleet
    from stacks.model.loading import parse
    from stacks.names import CLAIMS_STATUS_KEY
    from stacks.resolve import resolve_all

    before = json.loads((HERE / "answers.json").read_text())
    hub, clusters = fleet_docs()
    assert answers(hub, clusters) == before
    assert sum("refused" in a for a in before.values()) == 3  # a VPC, an API host and an ID taken: each kept
    granted = resolve_all(fleet(parse(hub), [parse(c) for c in clusters], discovery=True)).claims
    recorded = [{**c, "status": {**c.get("status", {}), CLAIMS_STATUS_KEY: granted[key]}}
                if (key := f"{c['metadata']['namespace']}/{c['metadata']['name']}") in granted else c
                for c in clusters]
    assert answers(hub, recorded) == before
