"""Private access to a cluster's API over AWS PrivateLink.

    PrivateLink (hubwright:privatelink:PrivateLink)
    ├── EndpointService   cluster account: endpoint service on the NLB "{infraID}-int"
    ├── HubEndpoint       hub account: security group + Interface endpoint in the placed VPC
    └── PrivateDns        hub account: private zone for the API host, record, VPC associations

Dependencies run zone → endpoint → service, so `pulumi destroy` (and removing
the component) deletes the zone first, then the endpoint, then the service.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_aws as aws

from components.providers import invoke_opts
from stacks.inputs import PrivateLinkInputs
from stacks.model.hub import AssociatedVPC, Subnet

_REGIONAL_DNS = re.compile(r"vpce-[0-9a-z]+-[0-9a-z]+\.vpce-svc-[0-9a-z]+\..*")


def regional_dns_entry(entries: Sequence[Mapping[str, str]]) -> Mapping[str, str]:
    """The endpoint's regional DNS entry (the zonal ones carry the AZ in their first label)."""
    for entry in entries:
        if _REGIONAL_DNS.fullmatch(entry["dns_name"]):
            return entry
    raise ValueError(f"no regional DNS name among the endpoint's entries {[e['dns_name'] for e in entries]}")


def subnets_in_zones(subnets: Sequence[Subnet], zones: Sequence[str], *, vpc_id: str, service: str) -> list[str]:
    chosen = sorted(s.subnet_id for s in subnets if s.availability_zone in set(zones))
    if not chosen:
        raise ValueError(
            f"no subnet of VPC {vpc_id} is in an availability zone that endpoint service {service} "
            f"supports ({', '.join(sorted(zones)) or 'none'}); add a subnet in one of them to the inventory"
        )
    return chosen


class EndpointService(pulumi.ComponentResource):
    """The endpoint service in the cluster's account, on the installer's internal NLB."""

    def __init__(self, name: str, *, nlb_name: str, allowed_principal: pulumi.Input[str],
                 provider: aws.Provider, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:privatelink:EndpointService", name, None, opts)
        nlb = aws.lb.get_load_balancer_output(name=nlb_name, opts=invoke_opts(self, provider))
        self.service = aws.ec2.VpcEndpointService(
            name,
            acceptance_required=False,  # only the one allowed principal can even see the service
            network_load_balancer_arns=[nlb.arn],
            allowed_principals=[allowed_principal],
            tags={"Name": name},
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        self.register_outputs({"serviceName": self.service.service_name, "serviceId": self.service.id})


class HubEndpoint(pulumi.ComponentResource):
    """An Interface endpoint in the hub account, reachable on the API port from hub VPCs only."""

    def __init__(self, name: str, *, link: PrivateLinkInputs, service: aws.ec2.VpcEndpointService,
                 provider: aws.Provider, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:privatelink:HubEndpoint", name, None, opts)
        vpc = link.endpoint_vpc
        child = pulumi.ResourceOptions(parent=self, provider=provider)

        self.security_group = aws.ec2.SecurityGroup(
            name,
            vpc_id=vpc.vpc_id,
            description=f"hubwright: Kubernetes API of {link.api_host} over PrivateLink",
            tags={"Name": name},
            opts=child,
        )
        for label, cidr in self._allowed_cidrs(link, provider):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-from-{label}",
                security_group_id=self.security_group.id,
                ip_protocol="tcp",
                from_port=link.api_port,
                to_port=link.api_port,
                cidr_ipv4=cidr,
                description=f"Kubernetes API from {label}",
                opts=child,
            )

        # Only subnets in AZs the service supports, as seen from the hub account (AZ names differ per account).
        seen = aws.ec2.get_vpc_endpoint_service_output(service_name=service.service_name,
                                                       opts=invoke_opts(self, provider))
        subnet_ids = pulumi.Output.all(seen.availability_zones, service.service_name).apply(
            lambda args: subnets_in_zones(vpc.subnets, args[0], vpc_id=vpc.vpc_id, service=args[1])
        )
        self.endpoint = aws.ec2.VpcEndpoint(
            name,
            vpc_id=vpc.vpc_id,
            service_name=service.service_name,
            vpc_endpoint_type="Interface",
            private_dns_enabled=False,  # hubwright owns resolution through its private zone
            subnet_ids=subnet_ids,
            security_group_ids=[self.security_group.id],
            tags={"Name": name},
            opts=child,
        )
        self.dns_entry = self.endpoint.dns_entries.apply(
            lambda entries: regional_dns_entry([{"dns_name": e.dns_name, "hosted_zone_id": e.hosted_zone_id}
                                                for e in entries])
        )
        self.register_outputs({"endpointId": self.endpoint.id, "dnsName": self.dns_entry["dns_name"]})

    def _allowed_cidrs(self, link: PrivateLinkInputs, provider: aws.Provider):
        yield link.endpoint_vpc.vpc_id, link.endpoint_vpc.cidr
        for assoc in link.associated_vpcs:
            if assoc.vpc_id == link.endpoint_vpc.vpc_id:
                continue
            # The lookup names the VPC's region (pulumi-aws 7's per-call region): the hub provider of the endpoint's
            # region reads it, so a region where nothing is built costs no provider (stacks.inputs.stack_targets).
            cidr = assoc.cidr or aws.ec2.get_vpc_output(
                id=assoc.vpc_id, region=assoc.region, opts=invoke_opts(self, provider)
            ).cidr_block
            yield assoc.vpc_id, cidr


class PrivateDns(pulumi.ComponentResource):
    """A private zone named after the API host, pointing at the endpoint, visible in the hub's VPCs."""

    def __init__(self, name: str, *, link: PrivateLinkInputs, endpoint: HubEndpoint, provider: aws.Provider,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:privatelink:PrivateDns", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        home = link.endpoint_vpc
        self.zone = aws.route53.Zone(
            name,
            name=link.api_host,
            comment=f"hubwright: {link.api_host} over PrivateLink",
            vpcs=[aws.route53.ZoneVpcArgs(vpc_id=home.vpc_id, vpc_region=home.region)],
            force_destroy=True,
            # The other associations are ZoneAssociation resources; the zone must not fight them.
            # depends_on the endpoint: destroy removes the zone before the endpoint.
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(ignore_changes=["vpcs"], depends_on=[endpoint.endpoint])
            ),
        )
        if link.dns_record_type == "Alias":
            self.record = aws.route53.Record(
                name,
                zone_id=self.zone.zone_id,
                name=link.api_host,
                type="A",
                aliases=[aws.route53.RecordAliasArgs(
                    name=endpoint.dns_entry["dns_name"],
                    zone_id=endpoint.dns_entry["hosted_zone_id"],
                    evaluate_target_health=False,
                )],
                opts=child,
            )
        else:  # partitions without ALIAS to endpoints (GovCloud): the endpoint's IPs
            ips = endpoint.endpoint.network_interface_ids.apply(
                lambda ids: pulumi.Output.all(*[
                    aws.ec2.get_network_interface_output(id=eni, opts=invoke_opts(self, provider)).private_ip
                    for eni in sorted(ids)
                ])
            )
            self.record = aws.route53.Record(
                name, zone_id=self.zone.zone_id, name=link.api_host, type="A", ttl=10, records=ips, opts=child
            )
        for vpc in self._associated(link.associated_vpcs, home.vpc_id):
            aws.route53.ZoneAssociation(
                f"{name}-{vpc.vpc_id}", zone_id=self.zone.zone_id, vpc_id=vpc.vpc_id, vpc_region=vpc.region,
                opts=child,
            )
        self.register_outputs({"zoneId": self.zone.zone_id})

    @staticmethod
    def _associated(vpcs: Sequence[AssociatedVPC], home: str) -> list[AssociatedVPC]:
        seen, out = {home}, []
        for vpc in vpcs:
            if vpc.vpc_id not in seen:
                seen.add(vpc.vpc_id)
                out.append(vpc)
        return out


@dataclass(frozen=True)
class PrivateLinkProviders:
    cluster: aws.Provider  # the cluster's account and region
    hub: aws.Provider  # the hub account in the endpoint's region (it also looks up associated VPCs' CIDRs)


class PrivateLink(pulumi.ComponentResource):
    def __init__(self, name: str, link: PrivateLinkInputs, providers: PrivateLinkProviders,
                 opts: pulumi.ResourceOptions | None = None, *, retained: bool = False):
        """`retained`: the stack of a HubCluster deleted with deletionPolicy Retain (stacks.retention): the endpoint
        service alone, as it was (the hub provider only reads the caller identity, as before); no hub side."""
        super().__init__("hubwright:privatelink:PrivateLink", name, None, opts)
        principal = link.allowed_principal or _caller_role(self, providers.hub)
        self.service = EndpointService(f"{name}-svc", nlb_name=link.nlb_name, allowed_principal=principal,
                                       provider=providers.cluster, opts=pulumi.ResourceOptions(parent=self))
        if retained:
            self.outputs = {"serviceName": self.service.service.service_name, "serviceId": self.service.service.id,
                            "infraID": link.infra_id, "retained": True}
            self.register_outputs(self.outputs)
            return
        self.endpoint = HubEndpoint(f"{name}-vpce", link=link, service=self.service.service,
                                    provider=providers.hub, opts=pulumi.ResourceOptions(parent=self))
        self.dns = PrivateDns(f"{name}-dns", link=link, endpoint=self.endpoint, provider=providers.hub,
                              opts=pulumi.ResourceOptions(parent=self))
        self.outputs = {
            "serviceName": self.service.service.service_name,
            "serviceId": self.service.service.id,
            "endpointId": self.endpoint.endpoint.id,
            "endpointDnsName": self.endpoint.dns_entry["dns_name"],
            "endpointVpcId": link.endpoint_vpc.vpc_id,
            "zoneId": self.dns.zone.zone_id,
            "infraID": link.infra_id,
        }
        self.register_outputs(self.outputs)


def _caller_role(parent: pulumi.Resource, hub: aws.Provider) -> pulumi.Output[str]:
    """The hub's IAM principal: the role behind an assumed-role session (path included), or the user."""
    caller = aws.get_caller_identity_output(opts=invoke_opts(parent, hub))
    return aws.iam.get_session_context_output(arn=caller.arn, opts=invoke_opts(parent, hub)).issuer_arn
