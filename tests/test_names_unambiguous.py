"""Every name kubectl resolves to a kind of ours is ours alone, on a hub that also runs the projects of our space.

A plural, singular, short name or kind that another project's CRD (or a built-in resource) also has makes
`kubectl get NAME` answer with one or the other, depending on kubectl's discovery cache: with Cluster API
installed, `kubectl get clusters` did. Our names come from stacks.names (KINDS, and RESERVED_KINDS for the kinds
still to come); theirs from their published CRDs (scripts/crds.sh reads them out of their Go modules:
doubles.thirdparty), from the API server's discovery for the built-in resources, and, for projects whose module
the Go proxy does not serve (or serves only in an old version), from their docs, written down below.

The live half asks the real kubectl, with Cluster API's real CRDs installed beside ours.
"""
from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import pytest

from doubles.envtest import EnvTest, project_crds, start_envtest
from doubles.kubectl import Kubectl
from doubles.thirdparty import crds as thirdparty_crds
from doubles.thirdparty import projects as thirdparty_projects
from stacks.names import CATEGORY, GROUP, KINDS, RESERVED_KINDS, VERSION, KindNames

# Resource names (plurals, singulars, short names, lower-cased kinds) and categories of projects, or of versions
# of projects, whose CRDs the Go module proxy does not serve, from their docs. Names only make the check
# stricter: a name listed here that a project has since dropped still may not be ours.
DOC_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    # The CNCF Sandbox project whose name this project had before 0.1.0 (CHANGELOG.md; the name is built so that
    # test_release.py's no-old-name check holds): its docs site and its manifests/crds directory.
    "cluster" + "net": {
        "names": ("managedclusters", "managedcluster", "mcls", "clusterregistrationrequests",
                  "clusterregistrationrequest", "crr", "subscriptions", "subscription", "sub", "helmcharts",
                  "helmchart", "chart", "helmreleases", "helmrelease", "hr", "manifests", "manifest", "bases", "base",
                  "descriptions", "description", "desc", "localizations", "localization", "loc", "globalizations",
                  "globalization", "glob", "feedinventories", "feedinventory", "finv"),
        "categories": ("cluster" + "net",),
    },
    # https://karmada.io/docs/userguide/scheduling/propagation-policy ,
    # https://github.com/karmada-io/karmada/tree/master/charts/karmada/_crds/bases
    "karmada": {
        "names": ("clusters", "cluster", "propagationpolicies", "propagationpolicy", "pp",
                  "clusterpropagationpolicies", "clusterpropagationpolicy", "cpp", "overridepolicies",
                  "overridepolicy", "op", "clusteroverridepolicies", "clusteroverridepolicy", "cop",
                  "resourcebindings", "resourcebinding", "rb", "clusterresourcebindings",
                  "clusterresourcebinding", "crb", "works", "work", "federatedresourcequotas",
                  "federatedresourcequota", "federatedhpas", "federatedhpa", "cronfederatedhpas",
                  "cronfederatedhpa", "multiclusteringresses", "multiclusteringress", "multiclusterservices",
                  "multiclusterservice", "serviceexports", "serviceimports", "resourceinterpretercustomizations",
                  "resourceinterpreterwebhookconfigurations", "workloadrebalancers", "remedies",
                  "clustertaintpolicies", "karmadas", "karmada"),
        "categories": (),
    },
    # https://aws-controllers-k8s.github.io/community/reference/ (EC2: the controller's ClusterRole lists them)
    "aws-controllers-k8s-ec2": {
        "names": ("dhcpoptions", "elasticipaddresses", "elasticipaddress", "flowlogs", "flowlog", "instances",
                  "instance", "internetgateways", "internetgateway", "natgateways", "natgateway", "networkacls",
                  "networkacl", "routetables", "routetable", "securitygroups", "securitygroup", "subnets",
                  "subnet", "transitgateways", "transitgateway", "transitgatewayvpcattachments",
                  "transitgatewayvpcattachment", "vpcendpoints", "vpcendpoint",
                  "vpcendpointserviceconfigurations", "vpcpeeringconnections", "vpcpeeringconnection", "vpcs",
                  "vpc", "capacityreservations", "launchtemplates", "managedprefixlists"),
        "categories": (),
    },
    # https://www.pulumi.com/docs/iac/guides/continuous-delivery/pulumi-kubernetes-operator/ (v2: Stack,
    # Program, Workspace, Update in pulumi.com and auto.pulumi.com)
    "pulumi-kubernetes-operator": {
        "names": ("stacks", "stack", "programs", "program", "workspaces", "workspace", "ws", "updates", "update"),
        "categories": ("pulumi",),
    },
    # https://projectcapsule.dev/docs/ (capsule.clastix.io, newer than the v0.1.0 module the proxy serves)
    "capsule-current": {
        "names": ("tenants", "tenant", "tnt", "capsuleconfigurations", "capsuleconfiguration",
                  "tenantresources", "tenantresource", "globaltenantresources", "globaltenantresource",
                  "resourcepools", "resourcepool", "resourcepoolclaims", "resourcepoolclaim"),
        "categories": (),
    },
    # https://github.com/openshift/hive/blob/master/docs/using-hive.md (kinds newer than v1.1.0)
    "hive-current": {
        "names": ("clusterdeploymentcustomizations", "clusterdeploymentcustomization", "fakeclusterinstalls",
                  "fakeclusterinstall", "clusterdeployments", "clusterdeployment", "cd", "clusterpools",
                  "clusterpool", "clusterclaims", "clusterclaim", "hiveconfigs", "hiveconfig"),
        "categories": (),
    },
    # https://fleet.rancher.io/ref-resources (fleet.cattle.io, newer than the v0.10.0 module)
    "rancher-fleet-current": {
        "names": ("gitrepos", "gitrepo", "helmops", "helmop", "bundles", "bundle", "bundledeployments",
                  "clusters", "cluster", "clustergroups", "clustergroup", "schedules", "schedule",
                  "gitreporestrictions", "imagescans"),
        "categories": ("fleet",),
    },
    # https://fluxcd.io/flux/components/ (helm-, notification- and image-controllers; the Flux Operator)
    "flux-others": {
        "names": ("helmreleases", "helmrelease", "hr", "alerts", "alert", "providers", "provider", "receivers",
                  "receiver", "imagerepositories", "imagerepository", "imagepolicies", "imagepolicy",
                  "imageupdateautomations", "imageupdateautomation", "fluxinstances", "fluxinstance",
                  "fluxreports", "fluxreport", "resourcesets", "resourceset", "resourcesetinputproviders"),
        "categories": ("all", "fluxcd", "fluxcd-sources", "fluxcd-appliers"),
    },
    # https://docs.crossplane.io/latest/ (v2: kinds newer than the v1.16.0 module)
    "crossplane-v2": {
        "names": ("managedresourcedefinitions", "mrd", "managedresourceactivationpolicies", "mrap",
                  "imageconfigs", "operations", "cronoperations", "watchoperations"),
        "categories": ("crossplane", "managed", "composite", "claim"),
    },
    # https://open-cluster-management.io/docs/concepts/ (kinds newer than the v0.13.0 module)
    "open-cluster-management-current": {
        "names": ("managedclusters", "managedcluster", "mcl", "placements", "placement", "clusterprofiles",
                  "clusterprofile", "managedclusteraddons", "addontemplates"),
        "categories": (),
    },
}

OURS = KINDS + RESERVED_KINDS


def our_names(kind: KindNames) -> set[str]:
    """Every name kubectl resolves to `kind`: plural, singular, short names, and the kind (case-insensitive)."""
    return {kind.plural, kind.singular, *kind.short, kind.kind.lower()}


def _crd_names(crd: dict) -> tuple[set[str], set[str]]:
    names = crd["spec"]["names"]
    found = {names["plural"], names.get("singular") or names["kind"].lower(), names["kind"].lower(),
             *(names.get("shortNames") or [])}
    return found, set(names.get("categories") or [])


@pytest.fixture(scope="module")
def theirs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(name -> owners, category -> owners) over every third-party CRD and every name written down above."""
    owners: dict[str, set[str]] = defaultdict(set)
    categories: dict[str, set[str]] = defaultdict(set)
    for project in thirdparty_projects():
        for crd in thirdparty_crds(project):
            names, cats = _crd_names(crd)
            owner = f"{project} ({crd['metadata']['name']})"
            for name in names:
                owners[name].add(owner)
            for cat in cats:
                categories[cat].add(owner)
    for project, listed in DOC_NAMES.items():
        for name in listed["names"]:
            owners[name].add(f"{project} (its docs)")
        for cat in listed["categories"]:
            categories[cat].add(f"{project} (its docs)")
    return owners, categories


def _collisions(names: dict[str, KindNames], owners: dict[str, set[str]]) -> list[str]:
    return [f"{name!r} of our {kind.kind} is also {', '.join(sorted(owners[name]))}"
            for name, kind in sorted(names.items()) if name in owners]


def _ours_by_name() -> dict[str, KindNames]:
    found: dict[str, KindNames] = {}
    for kind in OURS:
        for name in our_names(kind):
            assert found.setdefault(name, kind) == kind, f"{name!r} names both {found[name].kind} and {kind.kind}"
    return found


# --------------------------------------------------------------------------- static

def test_our_kinds_have_distinct_names_of_the_kubernetes_shape():
    names = _ours_by_name()  # asserts no two of our kinds share one
    assert len(names) == sum(len(our_names(k)) for k in OURS)
    for name in names:
        assert re.fullmatch(r"[a-z][a-z0-9]*", name), f"{name!r} is not a lower-case DNS label without dashes"


def test_the_crds_carry_exactly_the_names_stacks_names_declares():
    """stacks.crds generates the CRDs; stacks.names is where the names are checked: the two agree."""
    manifests = {c["spec"]["names"]["kind"]: c for c in project_crds()}
    assert set(manifests) == {k.kind for k in KINDS}, "a kind served but not in stacks.names.KINDS, or the reverse"
    for kind in KINDS:
        crd = manifests[kind.kind]
        names = crd["spec"]["names"]
        assert crd["spec"]["group"] == GROUP
        assert crd["metadata"]["name"] == f"{kind.plural}.{GROUP}"
        assert (names["plural"], names["singular"], tuple(names.get("shortNames") or ())) == \
            (kind.plural, kind.singular, kind.short), kind.kind
        assert names.get("categories") == [CATEGORY], kind.kind


def test_the_check_sees_the_collisions_that_prompted_it(theirs):
    """Not vacuous: the CRDs are loaded and the old names (Cluster/clusters, Tenant/tenants, a GitRepo) are caught."""
    owners, categories = theirs
    assert any(o.startswith("cluster-api (clusters.cluster.x-k8s.io)") for o in owners["clusters"])
    assert any(o.startswith("lieutenant (tenants.syn.tools)") for o in owners["tenants"])
    assert any(o.startswith("capsule (tenants.capsule.clastix.io)") for o in owners["tenants"])
    assert any(o.startswith("flux-source-controller") for o in owners["gitrepo"])
    assert any(o.startswith("lieutenant (gitrepos.syn.tools)") for o in owners["gitrepos"])
    assert any(o.startswith("prometheus-operator") for o in owners["servicemonitors"])
    assert "prometheus-operator (prometheusrules.monitoring.coreos.com)" in categories["prometheus-operator"]
    old = {"clusters": KindNames("Cluster", "clusters", ("cnc",)), "tenants": KindNames("Tenant", "tenants", ())}
    assert len(_collisions(old, owners)) == 2


def test_no_name_of_ours_is_another_projects(theirs):
    owners, _ = theirs
    problems = _collisions(_ours_by_name(), owners)
    assert not problems, "kubectl would resolve these to either project:\n" + "\n".join(problems)


def test_our_category_is_no_one_elses(theirs):
    owners, categories = theirs
    assert CATEGORY not in categories, f"category {CATEGORY!r} is also {sorted(categories[CATEGORY])}"
    assert CATEGORY not in owners, f"`kubectl get {CATEGORY}` would also match {sorted(owners[CATEGORY])}"
    assert CATEGORY not in _ours_by_name()


# --------------------------------------------------------------------------- live: the real kubectl

# Installed beside ours and Cluster API's on the live hub: projects that share no name with Cluster API (Lieutenant
# would: its clusters.syn.tools makes `kubectl get clusters` ambiguous between the two of them).
BESIDE = ("flux-source-controller", "argo-cd", "capsule")
MONITORING = ("ServiceMonitor", "PrometheusRule")  # what the install renders for the Prometheus Operator


@pytest.fixture(scope="module")
def hub_with_capi() -> Iterator[EnvTest]:
    """A server of the module's own with our CRDs, Cluster API's real CRDs, and those of BESIDE and MONITORING."""
    others = [crd for project in ("cluster-api", *BESIDE) for crd in thirdparty_crds(project)]
    others += [c for c in thirdparty_crds("prometheus-operator") if c["spec"]["names"]["kind"] in MONITORING]
    with start_envtest(crds=[*project_crds(), *others]) as env:
        yield env


def kubectl(env: EnvTest, cache: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The real kubectl against `env`, with its own discovery cache."""
    return Kubectl(env.kubeconfig(), cache)(*args, check=check)


# A request in kubectl's -v=6 log, as klog writes it today (verb="GET" url="https://...") or did before (GET https://...).
_GET = re.compile(r'(?:verb="GET" url="|GET )https://[^/\s"]+(/[^?\s"]*)')
_COLLECTION = re.compile(r"/api/v1/[a-z0-9]+|/apis/[^/]+/[^/]+/[a-z0-9]+")


def listed(env: EnvTest, cache: Path, name: str) -> set[str]:
    """The collections `kubectl get NAME -A` listed (from its -v=6 request log), e.g.
    {"/apis/cluster.x-k8s.io/v1beta2/clusters"}: what kubectl resolved NAME to."""
    done = kubectl(env, cache, "get", name, "-A", "-v=6")
    return {path for path in _GET.findall(done.stderr) if _COLLECTION.fullmatch(path)}


@pytest.mark.live
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_kubectl_resolves_every_name_of_ours_to_ours_beside_cluster_api(hub_with_capi, tmp_path, kind):
    ours = f"/apis/{GROUP}/{VERSION}/{kind.plural}"
    for name in sorted(our_names(kind) | {kind.kind, f"{kind.plural}.{GROUP}"}):
        assert listed(hub_with_capi, tmp_path, name) == {ours}, f"kubectl get {name}"
        explained = kubectl(hub_with_capi, tmp_path, "explain", name).stdout
        assert re.search(rf"^GROUP:\s+{re.escape(GROUP)}$", explained, re.M), f"kubectl explain {name}:\n{explained}"
        assert re.search(rf"^KIND:\s+{kind.kind}$", explained, re.M), f"kubectl explain {name}:\n{explained}"


@pytest.mark.live
def test_kubectl_get_clusters_is_cluster_apis_and_our_category_lists_only_ours(hub_with_capi, tmp_path):
    clusters = listed(hub_with_capi, tmp_path, "clusters")
    assert len(clusters) == 1 and re.fullmatch(r"/apis/cluster\.x-k8s\.io/v1[a-z0-9]*/clusters", clusters.pop())
    assert listed(hub_with_capi, tmp_path, CATEGORY) == {f"/apis/{GROUP}/{VERSION}/{k.plural}" for k in KINDS}
    # And Cluster API's own category is still Cluster API's alone.
    assert not any(f"/apis/{GROUP}/" in p for p in listed(hub_with_capi, tmp_path, "cluster-api"))


@pytest.mark.live
def test_kubectl_api_resources_shows_each_name_once(hub_with_capi, tmp_path):
    """`kubectl api-resources` (NAME SHORTNAMES APIVERSION NAMESPACED KIND): no short name or plural of ours on
    another row, built-in resources included."""
    rows = kubectl(hub_with_capi, tmp_path, "api-resources", "--no-headers").stdout.splitlines()
    owners: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        fields = row.split()
        if len(fields) == 4:  # no SHORTNAMES
            plural, short, api_version, kind = fields[0], "", fields[1], fields[3]
        else:
            plural, short, api_version, kind = fields[0], fields[1], fields[2], fields[4]
        if api_version.split("/")[0] == GROUP:
            continue
        for name in {plural, kind.lower(), *filter(None, short.split(","))}:
            owners[name].add(f"{api_version} {kind}")
    for name in ("clusters", "namespaces", "gitrepo", "applications", "tenants", "servicemonitors", "promrule"):
        assert owners[name], f"api-resources does not list {name}: the hub is not what this test says"
    problems = _collisions(_ours_by_name(), owners)
    assert not problems, "\n".join(problems)


@pytest.mark.live
def test_no_name_of_ours_is_a_builtin_resource(hub_with_capi):
    """Every resource the API server serves itself (core and aggregated groups, not CRDs), from its discovery."""
    status, installed = hub_with_capi.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    assert status == 200
    crd_groups = {c["spec"]["group"] for c in installed["items"]}
    owners: dict[str, set[str]] = defaultdict(set)
    categories: set[str] = set()
    status, groups = hub_with_capi.request("GET", "/apis")
    assert status == 200
    versions = ["/api/v1"] + [f"/apis/{v['groupVersion']}" for g in groups["groups"] if g["name"] not in crd_groups
                              for v in g["versions"]]
    for path in versions:
        status, found = hub_with_capi.request("GET", path)
        assert status == 200, (path, found)
        for res in found["resources"]:
            if "/" in res["name"]:
                continue  # a subresource
            for name in {res["name"], res.get("singularName") or "", res["kind"].lower(), *res.get("shortNames", [])}:
                if name:
                    owners[name].add(f"{path[1:]} {res['kind']}")
            categories.update(res.get("categories", []))
    assert "pods" in owners and "po" in owners, "discovery listed no core resources"
    problems = _collisions(_ours_by_name(), owners)
    assert not problems, "\n".join(problems)
    assert CATEGORY not in categories and CATEGORY not in owners
