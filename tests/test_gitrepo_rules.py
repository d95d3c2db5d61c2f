"""The Git repository controller's decisions (stacks/gitrepos/plan.py), pure: whose a repository found on the
forge is, which deploy keys change (never one hubwright did not add, never a write it was not asked for), what a
deletion does, and the status each outcome gets."""
from __future__ import annotations

from doubles.forge import public_key
from stacks.gitrepos import plan
from stacks.gitrepos.model import DeployKey, GitRepoStatus, ManagedKey
from stacks.names import ADOPT_REPOSITORY_ANNOTATION

PATH = "org/tenant-a"
A, B, C = public_key("a@x"), public_key(), public_key()


def wanted(name: str, key: str, write: bool = False) -> DeployKey:
    return DeployKey(name=name, public_key=key, write=write)


def managed(name: str, key_id: str, key: str, write: bool = False) -> ManagedKey:
    return ManagedKey(name=name, id=key_id, fingerprint=plan.fingerprint(key), write=write)


def held(key_id: str, title: str, key: str, write: bool = False) -> plan.HeldKey:
    return plan.HeldKey(key_id, title, " ".join(key.split()[:2]), write)


# --------------------------------------------------------------------------- ownership

def test_a_repository_recorded_as_ours_stays_ours_with_its_recorded_ownership():
    status = GitRepoStatus(repository_id="7", ownership="Adopted")
    assert plan.ownership(path=PATH, repository_id="7", status=status, annotations={}) == ("Adopted", None)
    assert plan.ownership(path=PATH, repository_id="7", status=GitRepoStatus(repository_id="7"),
                          annotations=None) == ("Created", None)


def test_the_intent_marker_claims_the_repository_a_lost_create_made():
    status = GitRepoStatus(creating=PATH)
    assert plan.ownership(path=PATH, repository_id="9", status=status, annotations={}) == ("Created", None)
    # ... for its own path only
    assert plan.ownership(path="org/other", repository_id="9", status=status, annotations={})[0] is None


def test_someone_elses_repository_is_refused_unless_the_admin_annotates_it():
    for status in (GitRepoStatus(), GitRepoStatus(repository_id="7", ownership="Created")):  # replaced: not ours
        owner, why = plan.ownership(path=PATH, repository_id="8", status=status, annotations={"x": "true"})
        assert owner is None
        assert why == (f"RepositoryExists: {PATH} exists on the forge and was not made by hubwright; set "
                       f"{ADOPT_REPOSITORY_ANNOTATION}=true to take it over")
    assert plan.ownership(path=PATH, repository_id="8", status=GitRepoStatus(),
                          annotations={ADOPT_REPOSITORY_ANNOTATION: "yes"})[0] is None
    assert plan.ownership(path=PATH, repository_id="8", status=GitRepoStatus(),
                          annotations={ADOPT_REPOSITORY_ANNOTATION: "true"}) == ("Adopted", None)


# --------------------------------------------------------------------------- deploy keys

def test_missing_keys_are_added_as_the_spec_says_and_kept_ones_stay():
    changes = plan.key_changes([wanted("a", A), wanted("b", B, write=True)], [managed("a", "1", A)],
                               [held("1", "a", A)])
    assert changes.remove == () and [k.name for k in changes.add] == ["b"] and changes.add[0].write is True
    assert [k.name for k in changes.keep] == ["a"] and changes.refused == ()
    assert not plan.key_changes([wanted("a", A)], [managed("a", "1", A)], [held("1", "a", A)]).changes


def test_a_key_not_added_by_hubwright_is_never_removed_nor_replaced():
    # theirs: a key of its own name, and one with the name we want
    on_forge = [held("5", "ci", C, write=True), held("6", "a", B)]
    changes = plan.key_changes([wanted("a", A)], [], on_forge)
    assert changes.remove == () and changes.add == ()
    assert changes.refused and "deploy key a" in changes.refused[0] and "not added by hubwright" in changes.refused[0]
    # and the same material under another title of theirs
    changes = plan.key_changes([wanted("mine", C)], [], on_forge)
    assert changes.add == () and changes.remove == () and "'ci'" in changes.refused[0]


def test_a_changed_key_or_write_flag_is_deleted_and_added_again_never_widened_silently():
    # material changed
    changes = plan.key_changes([wanted("a", B)], [managed("a", "1", A)], [held("1", "a", A)])
    assert changes.remove == ("1",) and [(k.name, k.write) for k in changes.add] == [("a", False)]
    # the spec now says write: re-added with write (the spec said so)
    changes = plan.key_changes([wanted("a", A, write=True)], [managed("a", "1", A)], [held("1", "a", A)])
    assert changes.remove == ("1",) and changes.add[0].write is True
    # someone widened our read-only key on the forge: put back read only
    changes = plan.key_changes([wanted("a", A)], [managed("a", "1", A)], [held("1", "a", A, write=True)])
    assert changes.remove == ("1",) and changes.add[0].write is False


def test_a_write_flag_is_never_added_unless_the_spec_says_write():
    changes = plan.key_changes([wanted("a", A), wanted("b", B)], [], [])
    assert [k.write for k in changes.add] == [False, False]


def test_managed_keys_no_longer_wanted_go_and_ones_deleted_by_hand_come_back():
    changes = plan.key_changes([wanted("b", B)], [managed("a", "1", A), managed("b", "2", B)], [held("1", "a", A)])
    assert changes.remove == ("1",) and [k.name for k in changes.add] == ["b"] and changes.keep == ()
    assert plan.managed_key(wanted("b", B), "9") == ManagedKey(name="b", id="9", fingerprint=plan.fingerprint(B),
                                                               write=False)


# --------------------------------------------------------------------------- deletion

def test_deletion_removes_managed_keys_and_deletes_only_an_owned_repository_with_delete():
    keys = [managed("a", "1", A), managed("gone", "3", B)]
    on_forge = [held("1", "a", A), held("5", "theirs", C)]
    keep = plan.deletion(policy="Retain", ownership="Created", managed=keys, on_forge=on_forge)
    assert keep == plan.DeletionPlan(remove_keys=("1",), delete_repository=False)
    assert plan.deletion(policy="Delete", ownership="Adopted", managed=keys, on_forge=on_forge).delete_repository
    assert not plan.deletion(policy="Delete", ownership=None, managed=[], on_forge=on_forge).delete_repository


# --------------------------------------------------------------------------- verdicts

def test_each_outcome_has_its_phase_state_and_reason():
    assert plan.synced() == plan.Verdict("Ready", "ready", "Ready", "the repository matches the spec")
    conflict = plan.synced(["deploy key x: ..."])
    assert (conflict.phase, conflict.reason, conflict.retry) == ("Stalled", "DeployKeyConflict", False)
    assert conflict.message == "DeployKeyConflict: deploy key x: ..."
    down = plan.unavailable("connection refused")
    assert (down.phase, down.state, down.reason, down.retry) == ("Retrying", "retrying", "ForgeUnavailable", True)
    assert plan.unavailable("x", deleting=True).phase == "Deleting"
    scope = plan.denied("403", "write:repository")
    assert (scope.phase, scope.state, scope.reason) == ("Stalled", "stalled", "TokenScope")
    assert "'write:repository'" in scope.message and not scope.retry
    missing = plan.credentials_missing("forge", "token", "hubwright-system")
    assert missing.reason == "CredentialsMissing" and "hubwright-system/forge" in missing.message
    assert plan.stalled(plan.REPOSITORY_EXISTS, plan.repository_exists(PATH)).message.startswith(
        "RepositoryExists: org/tenant-a exists")


# --------------------------------------------------------------------------- RBAC

def test_tenants_and_viewers_read_hubgitrepos_and_never_write_one():
    """A HubGitRepo a tenant wrote would spend the hub's forge token: tenant admins (the RoleBinding of their
    namespace), edit/admin (hubwright-tenant) and view (hubwright-viewer) read them or nothing."""
    from stacks.admission import tenant_admin_clusterrole
    from tests.test_controlplane import by_name, deploy, rule_verbs

    roles = by_name(deploy(), "rbac.authorization.k8s.io/v1:ClusterRole")
    for role in (tenant_admin_clusterrole(), roles["hubwright-viewer"]):
        verbs = rule_verbs(role["rules"])
        assert verbs[("hubwright.io", "hubgitrepos")] == {"get", "list", "watch"}
        assert not [key for key in verbs if key[1].startswith("hubgitrepos/")]
    assert not [key for key in rule_verbs(roles["hubwright-tenant"]["rules"]) if key[1].startswith("hubgitrepos")]


def test_the_service_writes_hubgitrepos_and_reads_secrets_only_in_its_namespace():
    from stacks.admission import gitrepo_controller_rules
    from tests.test_controlplane import by_name, deploy, rule_verbs

    rules = rule_verbs(gitrepo_controller_rules())
    assert rules == {("hubwright.io", "hubgitrepos"): {"get", "list", "watch", "create", "update", "patch", "delete"},
                     ("hubwright.io", "hubgitrepos/status"): {"update", "patch"},
                     ("hubwright.io", "hubgitrepos/finalizers"): {"update", "patch"}}
    plan = deploy()
    service = rule_verbs(by_name(plan, "rbac.authorization.k8s.io/v1:ClusterRole")["hubwright"]["rules"])
    assert ("", "secrets") not in service and service[("hubwright.io", "hubgitrepos")] >= {"create", "delete"}
    role = by_name(plan, "rbac.authorization.k8s.io/v1:Role")["hubwright"]
    assert role["metadata"]["namespace"] == "hubwright-system" and rule_verbs(role["rules"])[("", "secrets")] == {"get"}


def test_the_api_root_is_the_site_or_the_root_as_given_never_doubled():
    from stacks.gitrepos.model import api_root
    assert api_root("gitea", "https://git.example.com") == "https://git.example.com/api/v1"
    assert api_root("gitea", "https://git.example.com/api/v1/") == "https://git.example.com/api/v1"
    assert api_root("gitlab", "https://gitlab.com") == "https://gitlab.com/api/v4"
    assert api_root("gitlab", "https://gitlab.example.com/api/v4") == "https://gitlab.example.com/api/v4"
    assert api_root("github", "https://api.github.com") == "https://api.github.com"
    assert api_root("github", "https://ghe.example.com/api/v3") == "https://ghe.example.com/api/v3"


def test_a_deploy_key_name_given_twice_is_refused_in_a_hubgitrepo_and_in_a_template():
    import pytest
    from pydantic import ValidationError
    from stacks.gitrepos.model import GitRepoSpec, GitRepoTemplate
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    base = {"forge": "gitea", "apiURL": "https://git.example.com", "credentialsSecretRef": {"name": "forge"},
            "deployKeys": [{"name": "ci", "publicKey": key}, {"name": "ci", "publicKey": key}]}
    for model, extra in ((GitRepoSpec, {"path": "acme/prod"}), (GitRepoTemplate, {"owner": "acme"})):
        with pytest.raises(ValidationError, match="deploy key name 'ci' is given twice"):
            model.model_validate({**base, **extra})
