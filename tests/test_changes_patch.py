"""stacks.conditions.changes_patch: the one RFC 7386 diff (a runner's status writes, a source's HubCluster, the
registry's Tenant edits), checked by applying it (RFC 7386's MergePatch, as the API server does): the patch turns
`old` into `new`."""
from __future__ import annotations

from hypothesis import given, strategies as st

from automation.api.kube import merge_patch  # RFC 7386's MergePatch, as the registry applies a PATCH
from stacks.conditions import changes_patch

leaves = st.one_of(st.integers(0, 3), st.text("ab", max_size=2), st.lists(st.integers(0, 2), max_size=2))
documents = st.recursive(leaves, lambda inner: st.dictionaries(st.sampled_from("xyz"), inner, max_size=3), max_leaves=8)
objects = st.dictionaries(st.sampled_from("abc"), documents, max_size=3)


@given(objects, objects)
def test_the_patch_turns_old_into_new(old, new):
    assert merge_patch(old, changes_patch(old, new)) == new


def test_only_what_changed_and_an_emptied_object_is_emptied_not_merged():
    old = {"keep": 1, "gone": 2, "inner": {"a": 1, "b": 2}, "emptied": {"x": 1}, "list": [1, 2]}
    new = {"keep": 1, "inner": {"a": 1, "b": 3}, "emptied": {}, "list": [1]}
    assert changes_patch(old, new) == {"gone": None, "inner": {"b": 3}, "emptied": {"x": None}, "list": [1]}
    assert changes_patch(new, new) == {}
