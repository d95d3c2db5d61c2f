"""stacks.plandiff.render: the plan diff on a terminal and as a pull request's comment."""
import re

from stacks.plandiff.render import MARKDOWN_LIMIT, render_diff, render_markdown
from stacks.plandiff.compare import compare_plans
from tests.test_plandiff import ROUTE, SG, SG_INPUTS, res, stack

TAIL = re.compile(r"… and ([\d,]+) more stacks? changed \(([\d,]+) resources?\); run "
                  r"`python -m automation plan --baseline \.\.\. --format diff` for all\n\Z")


def plans():
    """A baseline and a new plan: one stack changed (an add, an update, a replace, a remove), one new, one removed,
    two unchanged; and a mesh group that grew."""
    route = res("rt", ROUTE, {"routeTableId": "rtb-1", "destinationCidrBlock": "10.0.0.0/16"})
    old = {"stacks": [
        stack(res("sg", inputs=SG_INPUTS), res("moved", inputs=SG_INPUTS), route, name="acme.prod-1"),
        stack(res("sg", inputs=SG_INPUTS), name="acme.gone"),
        stack(res("sg", inputs=SG_INPUTS), name="acme.same-1"),
        stack(name="acme.same-2"),
    ], "mesh": {"payments": {"members": 4, "state": "peering"}, "web": {"members": 2, "state": "peering"}}}
    new = {"stacks": [
        stack(res("sg", inputs={**SG_INPUTS, "tags": {"Name": "sg", "team": "a|b"}}),
              res("moved", inputs={**SG_INPUTS, "vpcId": "vpc-2"}),
              res("added", ROUTE, {"routeTableId": "rtb-2", "destinationCidrBlock": "10.1.0.0/16"}),
              name="acme.prod-1"),
        stack(res("sg", inputs=SG_INPUTS), name="acme.same-1"),
        stack(name="acme.same-2"),
        stack(res("sg", inputs={**SG_INPUTS, "description": "[secret 1a2b3c]"}), name="acme.fresh"),
    ], "mesh": {"payments": {"members": 5, "state": "peering"}, "web": {"members": 2, "state": "peering"}}}
    return old, new


def diff_doc():
    return compare_plans(*plans())


# ---- the terminal ----------------------------------------------------------------------------------------------


def test_the_terminal_diff_lists_each_changed_stacks_resources_with_sign_type_name_and_properties():
    text = render_diff(diff_doc(), color=False)
    assert "\x1b" not in text
    assert "stack acme.prod-1: changed (+1 ~1 +-1 -1)\n" in text
    assert f"  + {ROUTE} added\n      destinationCidrBlock: \"10.1.0.0/16\"\n" in text
    assert f"  ~ {SG} sg\n      tags: {{\"Name\": \"sg\"}} → {{\"Name\": \"sg\", \"team\": \"a|b\"}}\n" in text
    assert f"  +- {SG} moved\n      vpcId: \"vpc-1\" → \"vpc-2\"\n" in text
    assert f"  - {ROUTE} rt\n      destinationCidrBlock: \"10.0.0.0/16\"\n" in text
    assert "stack acme.fresh: new (+1 ~0 +-0 -0)\n" in text and "stack acme.gone: removed (+0 ~0 +-0 -1)\n" in text
    assert "mesh group payments: changed\n    members: 4 → 5\n" in text
    assert "web" not in text  # an unchanged group is not shown
    assert "acme.same" not in text and "\n2 stacks unchanged\n" in text
    assert text.endswith("\nStacks: 1 changed, 1 new, 1 removed, 2 unchanged. Resources: +2 ~1 +-1 -2\n")


def test_the_terminal_diff_never_shows_a_secret_and_is_the_same_bytes_every_time():
    doc = diff_doc()
    text = render_diff(doc, color=False)
    assert "description: \"[secret]\"" in text and "1a2b3c" not in text
    doc["stacks"][0]["resources"][-1]["properties"]["leak"] = {"old": "[secret abc123]", "new": ["[secret def456]"]}
    again = render_diff(doc, color=False)
    assert "abc123" not in again and "def456" not in again and 'leak: "[secret]" → ["[secret]"]' in again
    assert render_diff(doc, color=False) == again and render_diff(doc, color=True) == render_diff(doc, color=True)


def test_colours_only_when_asked_green_add_red_remove_yellow_update_magenta_replace():
    text = render_diff(diff_doc(), color=True)
    assert f"\x1b[32m+ {ROUTE} added\x1b[0m" in text
    assert f"\x1b[31m- {ROUTE} rt\x1b[0m" in text
    assert f"\x1b[33m~ {SG} sg\x1b[0m" in text
    assert f"\x1b[35m+- {SG} moved\x1b[0m" in text
    assert "\x1b[1;35mstack acme.prod-1: changed" in text  # a stack with a replace: magenta


def test_a_control_character_in_a_name_or_value_is_escaped_not_sent_to_the_terminal():
    doc = diff_doc()
    doc["stacks"][0]["resources"][-1]["urn"] += "\x1b[2J"
    doc["stacks"][0]["resources"][-1]["properties"]["tags"]["new"] = "\x1b]0;owned\x07\u202e"
    text = render_diff(doc, color=False)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text


def test_thousands_are_grouped():
    doc = diff_doc()
    doc["summary"]["stacks"]["unchanged"] = 9997
    text = render_diff(doc, color=False)
    assert "\n9,997 stacks unchanged\n" in text
    assert text.endswith("Stacks: 1 changed, 1 new, 1 removed, 9,997 unchanged. Resources: +2 ~1 +-1 -2\n")


def test_nothing_changed_says_so_in_one_line_and_the_counts():
    old, _ = plans()
    doc = compare_plans(old, old)
    assert render_diff(doc, color=False) == ("4 stacks unchanged\n\n"
                                             "Stacks: 0 changed, 0 new, 0 removed, 4 unchanged. "
                                             "Resources: +0 ~0 +-0 -0\n")
    text = render_markdown(doc)
    assert text.endswith("\n\nNo stack changes.\n")
    assert "<details>" not in text and "### Mesh groups" not in text and "| | 0 | 0 | 0 | 4 |" in text


# ---- the pull request's comment --------------------------------------------------------------------------------


def test_the_comment_starts_with_the_counts_then_the_mesh_then_one_section_per_changed_stack():
    text = render_markdown(diff_doc())
    assert text.startswith("## ")
    tables = [i for i, line in enumerate(text.splitlines()) if line.startswith("| Stacks |")]
    assert tables and text.index("| Stacks |") < text.index("| Resources |") < text.index("<details>")
    assert "| | 1 | 1 | 1 | 2 |" in text  # changed, new, removed, unchanged
    assert "| | 2 | 1 | 1 | 2 |" in text  # add, update, replace, remove
    assert text.index("### Mesh groups") < text.index("<details>")
    assert "| payments | changed | members | `4` | `5` |" in text and "| web |" not in text
    sections = re.findall(r"<details><summary>(.*?)</summary>\n\n(.*?)</details>", text, re.S)
    assert [summary for summary, _ in sections] == [
        "<code>+-</code> <b>acme.prod-1</b>: changed, +1 ~1 +-1 -1",
        "<code>+</code> <b>acme.fresh</b>: new, +1 ~0 +-0 -0",
        "<code>-</code> <b>acme.gone</b>: removed, +0 ~0 +-0 -1"]
    assert "acme.same" not in text
    changed = sections[0][1]
    assert f"| `+-` | moved | `{SG}` | vpcId | `\"vpc-1\"` | `\"vpc-2\"` |" in changed
    assert f"| `+` | added | `{ROUTE}` | destinationCidrBlock |  | `\"10.1.0.0/16\"` |" in changed
    assert f"| `-` | rt | `{ROUTE}` | destinationCidrBlock | `\"10.0.0.0/16\"` |  |" in changed
    assert f"| `+` | sg | `{SG}` |" in sections[1][1]  # a new stack: its resources, not each input
    assert "1a2b3c" not in text
    assert not TAIL.search(text)


def test_a_pipe_is_escaped_in_every_cell_and_a_backtick_gets_a_longer_fence():
    doc = diff_doc()
    tags = doc["stacks"][0]["resources"][-1]["properties"]["tags"]
    assert tags["new"] == {"Name": "sg", "team": "a|b"}
    tags["new"]["code"] = "x`y"
    doc["stacks"][0]["resources"][-1]["urn"] = doc["stacks"][0]["resources"][-1]["urn"] + "|`odd`<b>"
    text = render_markdown(doc)
    row = next(line for line in text.splitlines() if "tags" in line)
    assert '"team": "a\\|b"' in row and "a|b" not in row
    assert '``{"Name": "sg", "code": "x`y", "team": "a\\|b"}``' in row
    assert "sg\\|\\`odd\\`&lt;b&gt;" in row
    # a GFM table row: unescaped pipes are exactly its cell borders
    assert len(re.findall(r"(?<!\\)\|", row)) == 7


def test_the_comment_is_the_same_bytes_every_time():
    assert render_markdown(diff_doc()) == render_markdown(diff_doc())


def many_stacks(count):
    old, new = {"stacks": [], "mesh": {}}, {"stacks": [], "mesh": {}}
    for i in range(count):
        name = f"acme.c-{i:03d}"
        old["stacks"].append(stack(res("sg", inputs=SG_INPUTS), name=name))
        new["stacks"].append(stack(res("sg", inputs={**SG_INPUTS, "tags": {"n": str(i)}}),
                                   res("sg2", inputs=SG_INPUTS), name=name))
    return compare_plans(old, new)


def test_past_the_limit_the_comment_stops_adding_stacks_and_counts_the_rest():
    doc = many_stacks(60)
    limit = 4_000
    text = render_markdown(doc, limit=limit)
    assert len(text) <= limit
    shown = text.count("<details>")
    assert 0 < shown < 60
    tail = TAIL.search(text)
    assert tail and int(tail.group(1)) == 60 - shown and int(tail.group(2)) == 2 * (60 - shown)
    assert f"acme.c-{shown - 1:03d}" in text and f"acme.c-{shown:03d}" not in text
    assert text.index("| Stacks |") < text.index("<details>")  # the counts are never cut


def test_under_the_limit_every_stack_is_shown_and_the_default_limit_fits_a_github_comment():
    doc = many_stacks(60)
    whole = render_markdown(doc, limit=10**9)
    assert whole.count("<details>") == 60 and not TAIL.search(whole)
    assert render_markdown(doc, limit=len(whole)) == whole
    assert MARKDOWN_LIMIT < 65_536
    big = render_markdown(many_stacks(1000))
    assert len(big) <= MARKDOWN_LIMIT and TAIL.search(big)


def test_a_single_remaining_stack_is_named_in_the_singular():
    doc = many_stacks(2)
    first = render_markdown(doc, limit=10**9).split("<details>")
    limit = len("<details>".join(first[:2])) + 200
    text = render_markdown(doc, limit=limit)
    assert text.count("<details>") == 1
    assert "… and 1 more stack changed (2 resources);" in text
