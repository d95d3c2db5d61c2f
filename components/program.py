"""program(inputs): the one place that turns a stack's inputs (a cluster's StackInputs, or a transit stack's
TransitInputs) into Pulumi resources.

`__main__.py` (pulumi up/preview), the offline plan and the service's engine all
call this function, so all three build the same stack.
"""
from __future__ import annotations

from typing import Any

import pulumi

from stacks.haproxy import guest_manifests
from components.mesh import Mesh, MeshProviders
from components.privatelink import PrivateLink, PrivateLinkProviders
from components.providers import Providers
from components.transit import TransitNetwork
from stacks.inputs import INPUTS_CONFIG_KEY, StackInputs, StackProgramInputs, inputs_from_config, stack_targets
from stacks.targets import AwsTarget
from stacks.transit import TransitInputs


# The stack output holding the inputs the stack was built from (StackInputs.to_config()), for people and for
# `pulumi up` by hand (__main__.py). Like every output, a failed `up` that ran the program to its end replaces it,
# so it is not "the last applied inputs": PulumiEngine.applied() reads its own `inputs.<digest>` copy, named by
# the stack tag hubwright:applied (automation.adapters.engine.pulumi_engine.APPLIED_TAG).
INPUTS_OUTPUT = "inputs"


def program(inputs: StackProgramInputs) -> dict[str, Any]:
    """Register the stack's resources; return the stack outputs (the caller exports them)."""
    if isinstance(inputs, TransitInputs):
        return transit_program(inputs)
    if not isinstance(inputs, StackInputs):
        raise TypeError(f"stack {inputs.stack}: no program builds {type(inputs).__name__}")
    return cluster_program(inputs)


def cluster_program(inputs: StackInputs) -> dict[str, Any]:
    """A cluster's stack: its PrivateLink, its share of its mesh group, its node-side proxy's manifests."""
    targets = stack_targets(inputs)  # the one list of where each provider points (the audit and preflight read it)
    providers = Providers(inputs.tags, (targets.cluster, inputs.cluster_tags))
    outputs: dict[str, Any] = {"cluster": inputs.key, "inputsDigest": inputs.digest(), INPUTS_OUTPUT: inputs.to_config()}

    link = inputs.private_link
    if link is not None:
        hub_here = providers.aws(_where(targets.endpoint_hub, inputs.stack, "PrivateLink"))
        private_link = PrivateLink(
            inputs.stack,
            link,
            PrivateLinkProviders(
                cluster=providers.aws(_where(targets.cluster, inputs.stack, "PrivateLink")),
                hub=hub_here,
            ),
            retained=inputs.retained,
        )
        outputs["privateLink"] = private_link.outputs

    share = inputs.mesh
    if share is not None:  # the pairs this stack owns: both sides, each through its own account's provider
        # None: this member builds nothing on its side (stack_targets decides), so no provider is made for it.
        own = providers.aws(targets.cluster) if targets.cluster is not None else None
        mesh = Mesh(
            inputs.stack,
            share,
            MeshProviders(own=own, peers={key: providers.aws(target) for key, target in targets.peers.items()}),
        )
        outputs["mesh"] = mesh.outputs

    # The node-side proxy: no cloud resources, its manifests for the cluster (none where another project writes it).
    if inputs.shared_ingress is not None and not inputs.shared_ingress.external_proxy:
        outputs["sharedIngress"] = guest_manifests(inputs.shared_ingress)

    return outputs


def _where(target: AwsTarget | None, stack: str, what: str) -> AwsTarget:
    """A target stack_targets gives whenever the stack has `what` (its PrivateLink, its mesh share)."""
    if target is None:
        raise ValueError(f"stack {stack}: stacks.inputs.stack_targets gives no provider for its {what}")
    return target


def transit_program(inputs: TransitInputs) -> dict[str, Any]:
    """A network account's transit stack (stacks.transit): its gateways, shares, group tables and peerings."""
    providers = Providers(inputs.tags)
    network = TransitNetwork(inputs.stack, inputs, providers.aws)
    return {"transit": inputs.stack, "inputsDigest": inputs.digest(), INPUTS_OUTPUT: inputs.to_config(),
            "regions": network.outputs["regions"]}


def run_from_config() -> None:
    """What `pulumi up` runs: read the serialised inputs from stack config, build, export."""
    config = pulumi.Config("hubwright")
    inputs = inputs_from_config(config.require(INPUTS_CONFIG_KEY))  # what the engine and `inputs` write
    for name, value in program(inputs).items():
        pulumi.export(name, value)
