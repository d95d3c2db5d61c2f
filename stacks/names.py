"""Names that hubwright derives or accepts, and the limits they must fit. Pure; imports nothing of ours.

Every name and pattern that more than one layer uses lives here, and only here:
- the API: group, version, the finalizer, the annotations and labels hubwright reads or writes, the
  role-map ConfigMap's and the shared-ingress ConfigMap's default names;
- the patterns several modules check: IAM role and principal ARNs, shared-ingress cluster IDs;
- a cluster's key `namespace/name` and stack name `namespace.name` (Pulumi: at most 100 characters);
- what an API host may be: a DNS hostname (letters, digits and hyphens, labels of at most 63, the whole at
  most 253, at least two labels, ASCII: IDNA-encode anything else), never an IP literal, and never equal to
  or under a domain AWS owns (a private hosted zone named after it would shadow AWS's endpoints in the
  hub's VPCs) or one the hub administrator reserved;
- what a `host:port` may be (the shared ingress's backends and addresses): a DNS hostname, a dotted IPv4
  address or a bracketed IPv6 address, then a port 1-65535; nothing else, so no value can carry a space,
  a newline or a `#` into a proxy's config;
- the AWS limits a derived name or tag must fit (tag values 256, hosted zone names 255).
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from functools import lru_cache
from typing import Final, NamedTuple

# --------------------------------------------------------------------------- the API
GROUP = "hubwright.io"
VERSION = "v1alpha1"
# GROUP/VERSION spelled out, so that type checkers read it as the Literal stacks.model.resource's apiVersion field takes
# (tests/test_model.py checks that it is GROUP/VERSION).
API_VERSION: Final = "hubwright.io/v1alpha1"
CATEGORY = "hubwright"  # `kubectl get hubwright` lists every object of ours


class KindNames(NamedTuple):
    """A kind of ours and every name kubectl resolves to it: none may be another project's (a hub also runs
    Cluster API, Hive, Lieutenant, Flux, ... : tests/test_names_unambiguous.py checks against their CRDs)."""
    kind: str
    plural: str
    short: tuple[str, ...]

    @property
    def singular(self) -> str:
        return self.kind.lower()


CLUSTER = KindNames("HubCluster", "hubclusters", ("hwc",))
TENANT = KindNames("HubTenant", "hubtenants", ("hwt",))
HUBCONFIG = KindNames("HubConfig", "hubconfigs", ("hwcfg",))
STACKRUN = KindNames("HubStackRun", "hubstackruns", ("hwrun",))
# Not "GitRepo"/"gitrepo": Flux's GitRepository has the short name gitrepo and Lieutenant serves gitrepos.syn.tools.
GITREPO = KindNames("HubGitRepo", "hubgitrepos", ("hwrepo",))
# A HubCluster's stack kept after the HubCluster was deleted with deletionPolicy Retain (stacks/retention.py).
RETAINED = KindNames("HubRetainedStack", "hubretainedstacks", ("hwretained",))
KINDS = (CLUSTER, TENANT, HUBCONFIG, STACKRUN, GITREPO, RETAINED)
CLUSTERS, TENANTS, HUBCONFIGS = CLUSTER.plural, TENANT.plural, HUBCONFIG.plural  # the API's resource names
STACKRUNS = STACKRUN.plural
GITREPOS = GITREPO.plural
RETAINEDS = RETAINED.plural
# Reserved now, so that the kinds still to come are checked by the same test before they land (none pending).
RESERVED_KINDS: tuple[KindNames, ...] = ()
FINALIZER = f"{GROUP}/stack"  # holds a deleted Cluster until its stack is destroyed
ANNOTATION_PREFIX = f"{GROUP}/"  # the only Namespace annotations resolve() reads start with it

# Namespace annotations (the hub administrator's: tenants cannot write Namespaces)
OWNER_ACCOUNT_ANNOTATION = f"{GROUP}/owner-account-id"
DEFAULT_REGION_ANNOTATION = f"{GROUP}/default-region"
# The region every cluster of the namespace must use: it beats the cluster's own hubwright.io/region and
# spec.region, and a cluster asking for another is refused (RegionPinned), never moved (stacks.accounts).
PINNED_REGION_ANNOTATION = f"{GROUP}/pinned-region"
TENANT_ANNOTATION = f"{GROUP}/tenant"
ALLOWED_DOMAINS_ANNOTATION = f"{GROUP}/allowed-domains"  # comma-separated
ALLOWED_BACKENDS_ANNOTATION = f"{GROUP}/allowed-backends"  # comma-separated CIDR blocks and domains
# Per-namespace caps (stacks.tenancy.quota_refusals), overriding HubConfig spec.tenancy.max*PerNamespace
MAX_CLUSTERS_ANNOTATION = f"{GROUP}/max-clusters"
MAX_ENDPOINTS_ANNOTATION = f"{GROUP}/max-endpoints"
# Cluster metadata
REGION_ANNOTATION = f"{GROUP}/region"
MESH_LABEL = f"{GROUP}/mesh"
MESH_ENABLED_ANNOTATION = f"{GROUP}/mesh-enabled"
# Any new value: reconcile now (an `up` with refresh) and reset the backoff; status.lastHandledReconcileRequest
# says which value was handled. Not an input: resolve() never sees it (stacks.model.loading.resolved_part drops it).
RECONCILE_REQUEST_ANNOTATION = f"{GROUP}/reconcile-request"
# Any new value: check the stack for drift now (a `preview` with refresh, as the periodic check, its --drift-policy
# applied to what it finds); status.lastHandledDriftCheckRequest says which value was handled. Not an input either.
DRIFT_CHECK_REQUEST_ANNOTATION = f"{GROUP}/drift-check-request"
JOIN_STATUS_KEY = "meshJoin"  # status.meshJoin: a status field resolve() reads
# status.sharedIngress.clusterID: the shared-ingress ID the cluster was routed on, recorded once (resolve() reads it)
INGRESS_STATUS_KEY = "sharedIngress"
# Comma-separated prefixes the hub administrator lets a namespace's explicit shared-ingress IDs start with
# (besides "<namespace>.", which is always the namespace's own).
CLUSTER_ID_PREFIXES_ANNOTATION = f"{GROUP}/cluster-id-prefixes"

# Cluster sources (docs/sources.md): another project's cluster object (Cluster API, Hive) opts in with these, on
# itself, as in the clustermesh seed; MESH_LABEL and MESH_ENABLED_ANNOTATION put it in a group as on a HubCluster.
ENABLED_ANNOTATION = f"{GROUP}/enabled"  # "true": keep a HubCluster for this source object
PRIVATELINK_ANNOTATION = f"{GROUP}/privatelink"  # "true": the derived HubCluster asks for PrivateLink
SHARED_INGRESS_ANNOTATION = f"{GROUP}/shared-ingress"  # "true": routed through the shared ingress (HostedCluster)
SOURCE_FINALIZER = f"{GROUP}/source"  # holds a deleted source object until every stack touching it converged
# On a hand-written HubCluster: "true" keeps it as written when a source object of the same name opts in
# (otherwise the source's derived spec replaces it, keeping its stack).
OVERRIDES_SOURCE_ANNOTATION = f"{GROUP}/overrides-source"

# Deletion (docs/security.md "Deletion protection", docs/service.md "Deletion policy"), on a HubCluster or a
# source object (copied to the HubCluster it makes):
# "true": the API server refuses a DELETE of the object (ValidatingAdmissionPolicies, stacks/admission.py) until
# the annotation is removed.
DELETION_PROTECTION_ANNOTATION = f"{GROUP}/deletion-protection"
# On a source object only: "Delete" or "Retain", carried to its HubCluster's spec.deletionPolicy.
DELETION_POLICY_ANNOTATION = f"{GROUP}/deletion-policy"
# status.network: what discovery found in the cluster's account (stacks.network.found.FoundNetwork); resolve()
# reads it, all but its observedAt.
NETWORK_STATUS_KEY = "network"
NETWORK_ERROR_STATUS_KEY = "networkError"  # why discovery could not read it (the discovery's too), until it can
# status.claims: what the fleet's admission granted the cluster (its VPC, load balancer, infra ID, API host, account),
# recorded by the service so that a newcomer never takes it (stacks.claims); resolve() reads it.
CLAIMS_STATUS_KEY = "claims"
# The installer's cluster tag (OpenShift installers and CAPA both write it): kubernetes.io/cluster/<infraID>.
INSTALLER_CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
INSTALLER_CLUSTER_TAG_VALUES = ("owned", "shared")

# The registry (docs/registry.md). A Tenant is materialised as a Namespace of its name (or the one it adopts),
# labelled and annotated with TENANT_ANNOTATION = the Tenant's name.
TENANT_LABEL = f"{GROUP}/tenant"
TENANT_FINALIZER = f"{GROUP}/tenant"  # holds a deleted Tenant until its namespace has no Clusters
# Cluster label: the first 40 hex digits of the SHA-256 of its bootstrap token, to find the cluster by token.
BOOTSTRAP_TOKEN_LABEL = f"{GROUP}/bootstrap-token"
BOOTSTRAP_LABEL_CHARS = 40
# Virtual subresources, never served: what a SubjectAccessReview (or the admission policy's authorizer) asks.
FACTS_SUBRESOURCE = f"{CLUSTERS}/facts"  # create: push a cluster's dynamic facts through the registry API
BOOTSTRAP_SUBRESOURCE = f"{CLUSTERS}/bootstraptoken"  # create: issue or reset a cluster's bootstrap token
TENANT_OWNERSHIP_SUBRESOURCE = f"{TENANTS}/ownership"  # update: set a Tenant's account, region or namespace
# A cluster's facts agent on the hub (automation.adapters.kube.agent): its ServiceAccount, Role and RoleBinding carry
# the cluster's name as a label, and the ServiceAccount the uid of the Cluster it was granted for (a later
# Cluster of the same name has another uid: the registry refuses the old agent then).
AGENT_CLUSTER_LABEL = f"{GROUP}/cluster"
AGENT_CLUSTER_UID_ANNOTATION = f"{GROUP}/cluster-uid"

# Stack runs (docs/service.md, stacks/runs/): a HubStackRun beside its cluster (a transit stack's in the service's
# namespace) carries these; its inputs are in a Secret of the service's namespace that names the run it is for.
RUN_STACK_ANNOTATION = f"{GROUP}/stack"  # the Pulumi stack (on the run and on its Secret)
RUN_CLUSTER_LABEL = AGENT_CLUSTER_LABEL  # the cluster's name, as on its agent (`kubectl get hwrun -l hubwright.io/cluster=x`)
RUN_OPERATION_LABEL = f"{GROUP}/operation"
RUN_SECRET_LABEL = f"{GROUP}/stackrun"  # on a run's inputs Secret: every one carries it
RUN_FOR_ANNOTATION = f"{GROUP}/stackrun"  # on a run's inputs Secret: the run's namespace/name
RUN_DIGEST_ANNOTATION = f"{GROUP}/inputs-digest"  # on a run's inputs Secret: the digest the service recorded

# The registry's Git repositories (docs/registry.md "Git repositories", stacks/gitrepos/): a HubGitRepo made from a
# Tenant's template carries the tenant label; one made for a Cluster also the cluster label (AGENT_CLUSTER_LABEL).
GITREPO_FINALIZER = f"{GROUP}/gitrepo"  # holds a deleted HubGitRepo until its deletionPolicy was carried out
# "true" on a HubGitRepo: take over a repository that exists on the forge already (set by the hub administrator;
# without it an existing repository is refused, never adopted).
ADOPT_REPOSITORY_ANNOTATION = f"{GROUP}/adopt-repository"
GITREPO_ROLE_LABEL = f"{GROUP}/gitrepo-role"  # "tenant" or "cluster": which template made the HubGitRepo
AGENT_DEPLOY_KEY = "hubwright-agent"  # the deploy key's name for a cluster's agent key on its catalog repository

# Tags on every resource hubwright creates (the providers' default tags); the endpoint census tells
# hubwright's endpoints from other endpoints by the managed-by tag.
CLUSTER_TAG = f"{GROUP}/cluster"
TENANT_TAG = f"{GROUP}/tenant"
MANAGED_BY_TAG, MANAGED_BY = f"{GROUP}/managed-by", "hubwright"

ROLE_MAP_CONFIGMAP = "hubwright-role-account-map"  # in the service's namespace: account ID -> role ARN
SHARED_INGRESS_CONFIGMAP = "shared-ingress"  # the central proxy's config (deploy/'s CentralProxy name)

# --------------------------------------------------------------------------- the install
# The service's Deployment, ServiceAccount, ClusterRole and Lease (and its pods' prefix): the install names them so,
# and the HubStackRun admission policy lets only this ServiceAccount author runs (stacks/runs/admission.py).
SERVICE = "hubwright"

# --------------------------------------------------------------------------- patterns (unanchored: fullmatch them)
# Partitions by region prefix, most specific first (the ARN partition a region's roles live in); "aws" otherwise.
PARTITIONS = (("us-gov-", "aws-us-gov"), ("cn-", "aws-cn"), ("us-isob-", "aws-iso-b"), ("us-isof-", "aws-iso-f"),
              ("eu-isoe-", "aws-iso-e"), ("us-iso-", "aws-iso"), ("eusc-", "aws-eusc"))
PARTITION = "arn:(aws|" + "|".join(p for _, p in PARTITIONS) + ")"  # letters and hyphens only: no escaping
ROLE_ARN = re.compile(rf"{PARTITION}:iam::\d{{12}}:role/[\w+=,.@/-]{{1,512}}")
PRINCIPAL_ARN = re.compile(rf"{PARTITION}:iam::\d{{12}}:(root|(role|user)/[\w+=,.@/-]{{1,512}})")
# A shared-ingress cluster ID: safe as an HAProxy map key, backend name and log-format text.
CLUSTER_ID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}")
CLUSTER_ID_MAX = 63
_ID_HASH = 16  # hex digits of the hash that ends a shortened default ID (64 bits: no one finds a collision)

# --------------------------------------------------------------------------- limits
STACK_NAME_MAX = 100  # Pulumi stack names: [A-Za-z0-9_.-], at most 100 characters
TAG_VALUE_MAX = 256  # AWS resource tags: values at most 256 characters, keys 128
HOSTNAME_MAX = 253  # DNS: 253 characters written out (255 octets on the wire: Route 53's zone-name limit)
LABEL_MAX = 63

# Domains AWS (or the VPC resolver) answers for. A private zone equal to or under one of these, associated
# with the hub's VPCs, would capture AWS API endpoints, instance names or Amazon's own services there.
AWS_DOMAINS = (
    "amazonaws.com", "amazonaws.com.cn", "amazonaws-us-gov.com", "api.aws", "on.aws", "aws", "aws.dev",
    "amazon.com", "amazon.com.cn", "amazontrust.com", "awsapps.com", "awsglobalaccelerator.com",
    "cloudfront.net", "elasticbeanstalk.com", "compute.internal", "ec2.internal",
)

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)
_API_URL = re.compile(r"https://(?P<host>[^:/?#@\[\]]+)(?::(?P<port>[0-9]{1,5}))?/?")
# The same shape for the CRD schema (Kubernetes regexes search, so anchored): https://host[:port][/]
API_URL_PATTERN = r"^https://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?/?$"

_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{1,253})?:(?P<port>[1-9][0-9]{0,4})")
# The same grammar for the CRD schema, which cannot parse addresses: the model checks the rest.
_HOST_PATTERN = r"(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?)"
HOST_PORT_PATTERN = rf"^{_HOST_PATTERN}:[1-9][0-9]{{0,4}}$"
BIND_PATTERN = rf"^{_HOST_PATTERN}?:[1-9][0-9]{{0,4}}$"  # a listener: the host may be left out (every address)


def agent_name(cluster: str) -> str:
    """The facts agent's ServiceAccount, Role and RoleBinding of a cluster, in the cluster's namespace."""
    return f"hubwright-agent-{cluster}"


def cluster_key(namespace: str | None, name: str) -> str:
    return f"{namespace or 'default'}/{name}"


def default_cluster_id(namespace: str | None, name: str) -> str:
    """A new cluster's shared-ingress ID when it sets none: "<namespace>.<name>". A namespace name has no '.', so
    the part before the first '.' names the namespace and no two namespaces' IDs meet. Longer than 63
    characters: cut, and ended with a hash of namespace/name, so it stays unique; it always keeps a '.' (an
    explicit ID without one never meets a default: stacks.ingress.id_error)."""
    namespace = namespace or "default"
    full = f"{namespace}.{name}"
    if len(full) <= CLUSTER_ID_MAX:
        return full
    digest = hashlib.sha256(cluster_key(namespace, name).encode()).hexdigest()[:_ID_HASH]
    keep = CLUSTER_ID_MAX - _ID_HASH - 1
    if len(namespace) < keep:  # the namespace and its '.' stay whole
        return f"{full[:keep]}-{digest}"
    return f"{namespace[:keep - 1]}.{digest}"


def stack_name(namespace: str | None, name: str) -> str:
    """The cluster's stack: `namespace.name` ('.' cannot occur in a namespace, so it is unambiguous)."""
    return f"{namespace or 'default'}.{name}"


def hostname_error(host: str, *, min_labels: int = 2) -> str | None:
    """Why `host` is not a DNS hostname hubwright accepts, or None (a domain may have one label)."""
    if not host.isascii():
        return "is not ASCII: write an internationalised name IDNA-encoded (xn--...)"
    if len(host) > HOSTNAME_MAX:
        return f"is {len(host)} characters long; a DNS name has at most {HOSTNAME_MAX}"
    labels = host.split(".")
    if len(labels) < min_labels:
        return "is a single label; an API host is a fully qualified name such as api.cluster.example.com"
    for label in labels:
        if not _LABEL.fullmatch(label):
            return (f"has the label {label!r}; labels are 1-{LABEL_MAX} letters, digits and hyphens, "
                    "not starting or ending with a hyphen")
    if labels[-1].isdigit():
        return "is an IP address; an API host is a DNS name"
    return None


def under(host: str, domain: str) -> bool:
    """True when `host` is `domain` or a name below it (case-insensitive)."""
    host, domain = host.lower().rstrip("."), domain.lower().rstrip(".")
    return host == domain or host.endswith("." + domain)


def aws_domain_of(host: str) -> str | None:
    """The AWS-owned domain `host` is equal to or under, if any (the first of AWS_DOMAINS, as `under` reads them)."""
    labels = host.lower().rstrip(".").split(".")
    suffixes = {".".join(labels[i:]) for i in range(len(labels))}  # the name and every domain above it
    return next((domain for domain in AWS_DOMAINS if domain.lower().rstrip(".") in suffixes), None)


@lru_cache(maxsize=1 << 16)
def parse_api_url(value: str) -> tuple[str, int]:
    """(host, port) of an API URL `https://host[:port][/]`; ValueError saying why it is not one.

    Strict on purpose: no userinfo, query, fragment or path, no IP literal, and the host a DNS hostname
    outside AWS's domains, because the host becomes the name of a private hosted zone in the hub. Kept per value (a
    fleet's resolution asks about each cluster's URL several times).
    """
    found = _API_URL.fullmatch(value)
    if found is None:
        raise ValueError(f"{value!r} is not an https URL of the form https://host[:port] "
                         "(no user, path, query or fragment)")
    host, port = found["host"], int(found["port"] or 443)
    if not 0 < port < 65536:
        raise ValueError(f"{value!r} has an invalid port")
    problem = hostname_error(host)
    if problem is not None:
        raise ValueError(f"host {host!r} {problem}")
    owned = aws_domain_of(host)
    if owned is not None:
        raise ValueError(f"host {host!r} is under {owned}, a domain AWS owns: a private zone of that name "
                         "would shadow AWS endpoints in the hub's VPCs")
    return host, port


Host = str | ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_host_port(value: str, *, bind: bool = False) -> tuple[Host | None, int]:
    """(host, port) of `host:port`; ValueError saying why it is not one.

    host is a DNS hostname (returned as a lowercase str), a dotted IPv4 address or a bracketed IPv6 address
    (returned as ip_address objects, so callers never re-parse them). `bind`: the host may be left out
    (":6443", every address; host None). Strict on purpose: these values are written into HAProxy configs.
    """
    found = _HOST_PORT.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return _refuse(value, "is not host:port (a DNS name, an IPv4 address or a [bracketed] IPv6 address, "
                              "then ':' and a port)")
    raw, port = found["host"], int(found["port"])
    if port > 65535:
        return _refuse(value, f"has port {port}; ports are 1-65535")
    if raw is None:
        if not bind:
            return _refuse(value, "has no host")
        return None, port
    if raw.startswith("["):
        try:
            return ipaddress.IPv6Address(raw[1:-1]), port
        except ValueError:
            return _refuse(value, f"has {raw}, which is not an IPv6 address")
    if raw.replace(".", "").isdigit():
        try:
            return ipaddress.IPv4Address(raw), port
        except ValueError:
            return _refuse(value, f"has {raw}, which is not an IPv4 address (four numbers 0-255, no leading zeros)")
    problem = hostname_error(raw, min_labels=1)
    if problem is not None:
        return _refuse(value, f"has the host {raw!r}, which {problem}")
    return raw.lower(), port


def _refuse(value: object, why: str):
    shown = repr(value[:80] + ("..." if len(value) > 80 else "")) if isinstance(value, str) else repr(value)
    raise ValueError(f"{shown} {why}")


def format_host_port(host: Host | None, port: int) -> str:
    """host:port as HAProxy and every other tool writes it: IPv6 bracketed, no host for every address."""
    if host is None:
        return f":{port}"
    return f"[{host}]:{port}" if isinstance(host, ipaddress.IPv6Address) else f"{host}:{port}"


def stack_name_error(namespace: str | None, name: str) -> str | None:
    stack = stack_name(namespace, name)
    if len(stack) > STACK_NAME_MAX:
        return (f"the stack name {stack[:40]}... would be {len(stack)} characters; Pulumi stack names have at most "
                f"{STACK_NAME_MAX} (namespace + '.' + name): use a shorter name")
    return None

