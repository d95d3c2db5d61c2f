"""Transit Gateway resources: a network account's gateways (the transit stack) and a member's attachment.

    TransitNetwork (hubwright:mesh:TransitNetwork)          the transit stack `_tgw_<account>`
    └── per region, through the network account's provider there:
        ├── TransitGateway                                   default association/propagation off; shared
        │                                                    attachments are accepted explicitly, never auto
        ├── ram.ResourceShare + ResourceAssociation          the gateway, shared with the member accounts
        ├── ram.PrincipalAssociation ×member account
        ├── ram.ResourceShareAccepter ×member account        outside an Organization, the member's provider
        └── per group: RouteTable
            ├── VpcAttachmentAccepter ×member of another account
            ├── RouteTableAssociation ×member attachment: its group's table only
            ├── Route ×(member attachment × declared CIDR block), to its attachment (static: never propagated)
            └── to each later region of the group: PeeringAttachment (here) + PeeringAttachmentAccepter
                (there), associated with the group's table on both sides, static Routes both ways

    TransitLink (hubwright:mesh:TransitLink)                a member's side, in its own stack
    ├── VpcAttachment                                        over its transitSubnets, its own account
    └── Route ×(route table × summary CIDR)                  with summaryCIDRs only: to the gateway

Names derive from the stack, the region and the group, so re-runs never replace anything.
"""
from __future__ import annotations

from typing import Any, Callable

import pulumi
import pulumi_aws as aws

from stacks.mesh.share import MeshMember
from stacks.transit import (GROUP_TAG, TRANSIT_TAG, TransitAttachment, TransitInputs, TransitMember,
                            TransitRegionInputs)
from stacks.targets import AwsTarget

ProviderFor = Callable[[AwsTarget], aws.Provider]  # components.providers.Providers.aws: one per (account, region)


def _slug(group: str) -> str:
    """A group key as a resource-name fragment: 'acme/payments' -> 'acme-payments'."""
    return group.replace("/", "-")


def member_route_name(table: str, member: TransitMember, cidr: str) -> str:
    """The static route to one of a member's declared CIDR blocks in its group's table (named after the table's
    resource and the block: adding or removing another block leaves it alone)."""
    return f"{table}-{member.cluster.replace('/', '.')}-to-{cidr}"


class TransitNetwork(pulumi.ComponentResource):
    """Every gateway of one network account, with its RAM share, group route tables and region peerings."""

    def __init__(self, name: str, inputs: TransitInputs, provider_for: ProviderFor,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:mesh:TransitNetwork", name, None, opts)
        self.gateways: dict[str, aws.ec2transitgateway.TransitGateway] = {}
        self.tables: dict[tuple[str, str], aws.ec2transitgateway.RouteTable] = {}  # (region, group) -> table
        regions: dict[str, dict[str, Any]] = {}
        for region in inputs.regions:
            regions[region.region] = self._region(name, inputs, region, provider_for)
        by_region = {r.region: r for r in inputs.regions}
        peerings: dict[str, list[dict[str, Any]]] = {r: [] for r in by_region}
        for region in inputs.regions:
            for group in region.groups:
                for remote in group.remotes:
                    if region.region < remote.region and (remote.region, group.group) in self.tables:
                        made = self._peering(name, inputs, region, by_region[remote.region], group.group,
                                             remote.cidrs, provider_for)
                        peerings[region.region].append(made)
        for region_name, out in regions.items():
            out["peeringAttachments"] = peerings[region_name]
        self.outputs = {"stack": inputs.stack, "account": inputs.account_id, "regions": regions}
        self.register_outputs(self.outputs)

    def _region(self, name: str, inputs: TransitInputs, region: TransitRegionInputs,
                provider_for: ProviderFor) -> dict[str, Any]:
        here = pulumi.ResourceOptions(parent=self, provider=provider_for(region.network))
        prefix = f"{name}-{region.region}"
        tags = {"Name": prefix, TRANSIT_TAG: inputs.stack}
        gateway = aws.ec2transitgateway.TransitGateway(
            prefix,
            amazon_side_asn=inputs.asn,
            default_route_table_association="disable",
            default_route_table_propagation="disable",
            auto_accept_shared_attachments="disable",  # the group stack accepts exactly its members' attachments
            dns_support="enable",
            description=f"hubwright mesh: {inputs.stack} in {region.region}",
            tags=tags,
            opts=here,
        )
        self.gateways[region.region] = gateway
        share = aws.ram.ResourceShare(
            f"{prefix}-share", name=prefix, allow_external_principals=not inputs.organization, tags=tags, opts=here)
        aws.ram.ResourceAssociation(f"{prefix}-share-gateway", resource_arn=gateway.arn,
                                    resource_share_arn=share.arn, opts=here)
        accepted: dict[str, pulumi.Resource] = {}
        for member in region.members:
            principal = aws.ram.PrincipalAssociation(
                f"{prefix}-share-{member.account_id}", principal=member.account_id, resource_share_arn=share.arn,
                opts=here)
            accepted[member.account_id] = principal
            if not inputs.organization:
                accepted[member.account_id] = aws.ram.ResourceShareAccepter(
                    f"{prefix}-accept-{member.account_id}", share_arn=principal.resource_share_arn,
                    opts=pulumi.ResourceOptions(parent=self, provider=provider_for(member), depends_on=[principal]))
        tables: dict[str, Any] = {}
        for group in region.groups:
            slug = f"{prefix}-{_slug(group.group)}"
            table = aws.ec2transitgateway.RouteTable(
                slug, transit_gateway_id=gateway.id, tags={**tags, "Name": slug, GROUP_TAG: group.group}, opts=here)
            self.tables[(region.region, group.group)] = table
            tables[group.group] = table.id
            for attached in group.attachments:
                after: list[pulumi.Resource] = []
                if attached.accept:
                    after.append(aws.ec2transitgateway.VpcAttachmentAccepter(
                        f"{slug}-{attached.cluster.replace('/', '.')}-accept",
                        transit_gateway_attachment_id=attached.attachment_id,
                        transit_gateway_default_route_table_association=False,
                        transit_gateway_default_route_table_propagation=False,
                        tags={**tags, "Name": attached.cluster, GROUP_TAG: group.group},
                        opts=pulumi.ResourceOptions(parent=self, provider=provider_for(region.network))))
                member_opts = pulumi.ResourceOptions(parent=self, provider=provider_for(region.network),
                                                     depends_on=after)
                aws.ec2transitgateway.RouteTableAssociation(
                    f"{slug}-{attached.cluster.replace('/', '.')}", transit_gateway_attachment_id=attached.attachment_id,
                    transit_gateway_route_table_id=table.id, opts=member_opts)
                # A static route to exactly each declared CIDR block, never a propagation: a propagation advertises
                # every CIDR the VPC has, undeclared secondary ones included (issue 31). A different type and name
                # from the propagation it replaces, so an update creates it before it deletes the propagation.
                for cidr in attached.cidrs:
                    aws.ec2transitgateway.Route(
                        member_route_name(slug, attached, cidr), destination_cidr_block=cidr,
                        transit_gateway_attachment_id=attached.attachment_id, transit_gateway_route_table_id=table.id,
                        opts=member_opts)
        return {"transitGatewayId": gateway.id, "transitGatewayArn": gateway.arn, "shareArn": share.arn,
                "routeTables": tables}

    def _peering(self, name: str, inputs: TransitInputs, here: TransitRegionInputs, there: TransitRegionInputs,
                 group: str, remote_cidrs: tuple[str, ...], provider_for: ProviderFor) -> dict[str, Any]:
        """The group's own peering between two regions' gateways, and its static routes both ways."""
        slug = f"{name}-{_slug(group)}-{here.region}-{there.region}"
        tags = {"Name": slug, TRANSIT_TAG: inputs.stack, GROUP_TAG: group}
        near = pulumi.ResourceOptions(parent=self, provider=provider_for(here.network))
        attachment = aws.ec2transitgateway.PeeringAttachment(
            slug, transit_gateway_id=self.gateways[here.region].id, peer_account_id=inputs.account_id,
            peer_region=there.region, peer_transit_gateway_id=self.gateways[there.region].id, tags=tags, opts=near)
        far = pulumi.ResourceOptions(parent=self, provider=provider_for(there.network), depends_on=[attachment])
        accepter = aws.ec2transitgateway.PeeringAttachmentAccepter(
            f"{slug}-accept", transit_gateway_attachment_id=attachment.id, tags=tags, opts=far)
        near_table, far_table = self.tables[(here.region, group)], self.tables[(there.region, group)]
        after = pulumi.ResourceOptions(depends_on=[accepter])
        aws.ec2transitgateway.RouteTableAssociation(
            f"{slug}-{here.region}", transit_gateway_attachment_id=attachment.id,
            transit_gateway_route_table_id=near_table.id, opts=pulumi.ResourceOptions.merge(near, after))
        aws.ec2transitgateway.RouteTableAssociation(
            f"{slug}-{there.region}", transit_gateway_attachment_id=accepter.id,
            transit_gateway_route_table_id=far_table.id, opts=pulumi.ResourceOptions.merge(far, after))
        # Static routes (a peering attachment propagates nothing): here -> the group's CIDRs there, and back.
        for cidr in remote_cidrs:
            aws.ec2transitgateway.Route(
                f"{slug}-to-{cidr}", destination_cidr_block=cidr, transit_gateway_attachment_id=attachment.id,
                transit_gateway_route_table_id=near_table.id, opts=pulumi.ResourceOptions.merge(near, after))
        back = next((g for g in there.groups if g.group == group), None)
        for remote in (back.remotes if back is not None else ()):
            if remote.region != here.region:
                continue
            for cidr in remote.cidrs:
                aws.ec2transitgateway.Route(
                    f"{slug}-from-{cidr}", destination_cidr_block=cidr, transit_gateway_attachment_id=accepter.id,
                    transit_gateway_route_table_id=far_table.id, opts=pulumi.ResourceOptions.merge(far, after))
        return {"group": group, "peerRegion": there.region, "id": attachment.id}


class TransitLink(pulumi.ComponentResource):
    """A member's VPC attachment to its region's gateway, and with summaryCIDRs its routes to them."""

    def __init__(self, name: str, *, group: str, member: MeshMember, attachment: TransitAttachment,
                 provider: aws.Provider, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:mesh:TransitLink", name, None, opts)
        own = pulumi.ResourceOptions(parent=self, provider=provider)
        tags = {"Name": member.stack, GROUP_TAG: group, TRANSIT_TAG: attachment.transit_stack}
        self.attachment = aws.ec2transitgateway.VpcAttachment(
            name,
            transit_gateway_id=attachment.transit_gateway_id,
            vpc_id=member.vpc_id,
            subnet_ids=list(attachment.subnet_ids),
            transit_gateway_default_route_table_association=False,
            transit_gateway_default_route_table_propagation=False,
            dns_support="enable",
            tags=tags,
            opts=own,
        )
        self.routes: list[dict[str, Any]] = []
        for table in member.route_table_ids:
            for cidr in attachment.summary_cidrs:
                aws.ec2.Route(f"{name}-{table}-{cidr}", route_table_id=table, destination_cidr_block=cidr,
                              transit_gateway_id=attachment.transit_gateway_id,
                              opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                                          depends_on=[self.attachment]))
                self.routes.append({"cluster": member.key, "routeTableId": table, "destination": cidr,
                                    "transitGatewayId": attachment.transit_gateway_id})
        self.outputs = {"attachmentId": self.attachment.id, "transitGatewayId": attachment.transit_gateway_id,
                        "routes": self.routes}
        self.register_outputs(self.outputs)
