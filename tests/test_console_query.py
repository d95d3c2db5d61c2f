"""stacks.console: a cluster's fleet-page row from its object, and the fleet page's question over the rows a viewer
may see: search, filters, counts and choices from those rows only, sort, pages."""
from __future__ import annotations

from stacks.console.query import Query, answer
from stacks.console.rows import Row, row_of, tenant_of
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL, TENANT_ANNOTATION


def raw(namespace: str, name: str, *, ready: str = "True", reason: str = "Succeeded", stalled: bool = False,
        drift: str | None = None, group: str | None = None, deleting: bool = False) -> dict:
    conditions = [{"type": "Ready", "status": ready, "reason": reason, "message": f"{name} says {reason}"}]
    if stalled:
        conditions.append({"type": "Stalled", "status": "True", "reason": reason, "message": "refused"})
    if drift is not None:
        conditions.append({"type": "DriftDetected", "status": drift, "reason": "Checked", "message": ""})
    meta: dict = {"namespace": namespace, "name": name}
    if group:
        meta.update(labels={MESH_LABEL: group}, annotations={MESH_ENABLED_ANNOTATION: "true"})
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return {"metadata": meta, "status": {
        "account": "222222222222", "region": "us-east-1", "conditions": conditions,
        "lastUpdate": {"operation": "up", "result": "Succeeded", "startTime": "2026-11-30T10:00:00Z",
                       "endTime": f"2026-11-30T10:00:{len(name):02d}Z", "changes": {"create": 2, "same": 4}}}}


def test_a_row_says_state_reason_placement_group_last_run_and_drift():
    row = row_of(raw("acme", "prod-1", group="core", drift="True"), "acme-corp")
    assert (row.key, row.tenant, row.state, row.reason) == ("acme/prod-1", "acme-corp", "Ready", "Succeeded")
    assert (row.account, row.region, row.group, row.drift) == ("222222222222", "us-east-1", "core", "Drifted")
    assert (row.last_operation, row.last_result, row.changes) == ("up", "Succeeded", "2 create")
    stalled = row_of(raw("acme", "bad", ready="False", reason="AccountNotOwned", stalled=True), "acme")
    assert (stalled.state, stalled.reason, stalled.message) == ("Stalled", "AccountNotOwned", "refused")
    assert row_of(raw("acme", "gone", deleting=True, group="core"), "acme").state == "Deleting"
    assert row_of(raw("acme", "gone", deleting=True, group="core"), "acme").group == ""  # group_of's rule
    assert row_of({"metadata": {"namespace": "a", "name": "b"}, "status": {"conditions": "junk"}}, "a").state == \
        "Unknown"  # a status the model refuses reads as none


def test_a_namespaces_tenant_is_its_annotation_else_its_name():
    assert tenant_of("acme", {TENANT_ANNOTATION: "t-acme"}, None) == "t-acme"
    assert tenant_of("acme", None, None) == "acme"


def rows(n: int, namespace: str = "acme") -> list[Row]:
    return [row_of(raw(namespace, f"c{i:03d}", ready="True" if i % 3 else "False", reason="Succeeded" if i % 3
                       else "UpdateFailed"), namespace) for i in range(n)]


def test_search_filters_counts_and_choices_come_from_the_rows_given_only():
    seen = rows(10)
    found = answer(seen, Query.of({"q": "c00", "state": "Ready"}), page_size=50)
    assert [r.name for r in found.rows] == ["c001", "c002", "c004", "c005", "c007", "c008"]
    assert found.total == 10 and found.matched == 6 and found.counts["Ready"] == 6 and found.counts["Unknown"] == 0
    assert found.choices["tenant"] == ("acme",) and found.choices["reason"] == ("Succeeded", "UpdateFailed")
    assert answer(seen, Query.of({"q": "globex"}), 50).matched == 0


def test_sort_and_pages():
    seen = rows(25)
    first = answer(seen, Query.of({"sort": "name", "order": "desc"}), page_size=10)
    assert first.pages == 3 and [r.name for r in first.rows][:2] == ["c024", "c023"]
    last = answer(seen, Query.of({"page": "9"}), page_size=10)
    assert last.page == 3 and len(last.rows) == 5  # past the end: the last page
    assert Query.of({"page": "x", "sort": "nope"}) == Query()  # bad values fall back
    assert Query.of({"q": "a", "state": "Ready", "page": "2"}).params(page=1) == {"q": "a", "state": "Ready"}
