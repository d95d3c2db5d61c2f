"""The run history's live program (tests/test_history_envtest.py): one CloudThing per cluster (a dynamic resource
whose "cloud" is a file, doubles.pulumi_programs) whose value is the cluster's spec.tags, so a spec edit changes a
property the run's diff must show old → new. Importable by name (`TAGGED`), as a worker pool needs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from doubles.pulumi_programs import CloudThing
from stacks.inputs import StackInputs

TAGGED = "tests.history_live_programs:tagged"


def tagged(inputs: StackInputs, *, cloud: str) -> Mapping[str, Any]:
    Path(cloud).mkdir(parents=True, exist_ok=True)
    CloudThing(f"{inputs.name}-thing", cloud=cloud, value=json.dumps(inputs.cluster_tags, sort_keys=True))
    return {"cluster": inputs.key, "inputsDigest": inputs.digest()}
