"""The console's picture of a mesh group (stacks.mesh.svg.render_svg): a standalone, well-formed, deterministic SVG
document, its members links to their cluster pages, every text escaped, no style attribute or element and no
script (the console's CSP is style-src 'self'), accessible (role="group", a <title> and a <desc>)."""
import itertools
import xml.etree.ElementTree as ET

import pytest

from stacks.mesh.picture import Edge, Group, Node, groups
from stacks.mesh.svg import render_svg
from stacks.resolve import resolve_all
from stacks.transit import GroupState, MeshStatus
from doubles.factories import fleet
from tests.test_mesh import hub, member
from tests.test_transit import tgw_member

SVG = "{http://www.w3.org/2000/svg}"
TGW_HUB = hub(mesh={"groups": {"core": {"topology": "transitGateway"}}})
MIGRATING = GroupState(topology="peering", migrating_to="transitGateway", step="routes")


def page(key: str) -> str:
    return f"/clusters/{key}"


def mesh_of(h, clusters, state: GroupState | None = None):
    return resolve_all(fleet(h, clusters, mesh_status=MeshStatus({"core": state}, {}, {}) if state else None)).mesh


FLEETS = {
    "peering with a refused cluster": lambda: mesh_of(hub(), [member(i) for i in range(4)]
                                                      + [member(4, cidr="10.0.0.0/17")]),
    "one member": lambda: mesh_of(hub(), [member(0)]),
    "migrating to a Transit Gateway": lambda: mesh_of(TGW_HUB, [tgw_member(i, stamp=i + 1) for i in range(4)],
                                                      MIGRATING),
    "a peering summary": lambda: mesh_of(hub(), [member(i) for i in range(12)] + [member(12, cidr="10.3.0.0/16")]),
    "a Transit Gateway summary": lambda: mesh_of(TGW_HUB, [tgw_member(i, stamp=i + 1) for i in range(9)],
                                                 GroupState(topology="transitGateway")),
}


def drawn(name: str) -> tuple[object, Group, str]:
    mesh = FLEETS[name]()
    [group] = groups(mesh)
    return mesh, group, render_svg(group, page)


def numbers(text: str) -> list[float]:
    return [float(v) for v in text.replace(",", " ").split()]


@pytest.mark.parametrize("name", FLEETS)
def test_each_picture_is_a_well_formed_accessible_svg_whose_viewbox_holds_its_content(name):
    _, group, svg = drawn(name)
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("role") == "group"
    title = root.find(f"{SVG}title")
    desc = root.find(f"{SVG}desc")
    assert root.get("aria-labelledby") == title.get("id") and root.get("aria-describedby") == desc.get("id")
    assert title.text == f"Mesh group {group.label}" and desc.text.startswith(f"Mesh group {group.label}.")
    x0, y0, width, height = numbers(root.get("viewBox"))
    assert (x0, y0) == (0, 0) and (root.get("width"), root.get("height")) == tuple(root.get("viewBox").split()[2:])
    for el in root.iter(f"{SVG}rect"):
        x, y, w, h = (float(el.get(a)) for a in ("x", "y", "width", "height"))
        assert 0 <= x and x + w <= width and 0 <= y and y + h <= height
    for el in root.iter(f"{SVG}polygon"):
        points = numbers(el.get("points"))
        assert all(0 <= px <= width for px in points[::2]) and all(0 <= py <= height for py in points[1::2])
    for el in root.iter(f"{SVG}line"):
        assert 0 <= float(el.get("x1")) <= width and 0 <= float(el.get("y2")) <= height
    assert "\\n" not in svg  # the model's line breaks are lines, not text


@pytest.mark.parametrize("name", FLEETS)
def test_no_style_attribute_or_element_no_script_and_no_event_handler(name):
    svg = drawn(name)[2]
    assert "style=" not in svg and "<style" not in svg and "<script" not in svg and "javascript:" not in svg
    for el in ET.fromstring(svg).iter():
        assert not [a for a in el.attrib if a.lower().startswith("on") or a == "style"], el.tag


@pytest.mark.parametrize("name", FLEETS)
def test_every_member_and_refused_cluster_links_to_its_cluster_page_and_each_link_is_focusable(name):
    mesh, _, svg = drawn(name)
    view = mesh.groups["core"]
    links = list(ET.fromstring(svg).iter(f"{SVG}a"))
    assert sorted(a.get("href") for a in links) == sorted(page(k) for k in (*view.members, *view.rejected))
    for a in links:
        assert a.get("tabindex") == "0" and a.find(f"{SVG}title").text == f"Open cluster {a.get('href')[10:]}"
        assert "".join(a.itertext()).count(a.get("href")[10:]) >= 1  # the link holds its cluster's text


def test_a_cluster_without_a_page_is_drawn_without_a_link():
    mesh = FLEETS["peering with a refused cluster"]()
    [group] = groups(mesh)
    svg = render_svg(group, lambda key: page(key) if key.startswith("acme/") else None)
    hrefs = [a.get("href") for a in ET.fromstring(svg).iter(f"{SVG}a")]
    assert hrefs == [page("acme/c00"), page("acme/c02"), page("acme/c04")]
    assert "globex/c01" in svg and "<a" not in render_svg(group, lambda key: None)


def test_a_members_label_lines_are_its_text_lines():
    _, group, svg = drawn("peering with a refused cluster")
    root = ET.fromstring(svg)
    [c00] = [a for a in root.iter(f"{SVG}a") if a.get("href") == page("acme/c00")]
    assert [t.text for t in c00.iter(f"{SVG}tspan")] == ["acme/c00", "222222222222 us-east-1", "10.0.0.0/16"]
    [refused] = [a for a in root.iter(f"{SVG}a") if a.get("href") == page("acme/c04")]
    [box] = refused.iter(f"{SVG}rect")
    assert box.get("stroke-dasharray")  # a left-out cluster is dashed, with its reason
    assert " ".join(t.text for t in refused.iter(f"{SVG}tspan")).startswith(
        "acme/c04 (left out) MeshCIDROverlap: CIDR 10.0.0.0/17 of HubCluster acme/c04 overlaps")


def test_gateways_are_hexagons_and_each_link_line_says_its_kind():
    _, group, svg = drawn("migrating to a Transit Gateway")
    root = ET.fromstring(svg)
    assert len(list(root.iter(f"{SVG}polygon"))) == len([n for n in group.nodes if n.gateway]) == 2
    titles = sorted(line.find(f"{SVG}title").text for line in root.iter(f"{SVG}line"))
    assert len(titles) == len(group.edges)
    assert sum(t.startswith("VPC peering: ") for t in titles) == 6
    assert sum(t.startswith("Transit Gateway attachment: ") for t in titles) == 4
    assert titles.count("Transit Gateway peering: Transit Gateway 111111111111 eu-west-1 to Transit Gateway "
                        "111111111111 us-east-1") == 1
    assert "VPC peering: globex/c01 to acme/c00" in titles


def test_a_summary_draws_its_table_as_rows_in_columns_each_row_of_a_cluster_a_link():
    mesh, group, svg = drawn("a peering summary")
    root = ET.fromstring(svg)
    [table] = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node table"]
    row_of_c01 = [a for a in table.iter(f"{SVG}a") if a.get("href") == page("globex/c01")][0]
    assert [t.text for t in row_of_c01.iter(f"{SVG}tspan")] == ["2", "globex/c01", "333333333333 us-east-1",
                                                                "10.1.0.0/16", "1 peering with #1"]
    columns = [{t.get("x") for t in text.iter(f"{SVG}tspan")} for text in table.iter(f"{SVG}text")][:13]
    assert all(c == columns[0] for c in columns)  # header and member rows: the same five columns


def members_rects(svg: str) -> list[tuple[float, float, float, float]]:
    return [tuple(float(r.get(a)) for a in ("x", "y", "width", "height"))
            for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("class") in ("node member", "node left-out")
            for r in g.iter(f"{SVG}rect")]


@pytest.mark.parametrize("n", range(1, 7))
@pytest.mark.parametrize("h, make, state", [(hub(), member, None), (TGW_HUB, tgw_member, MIGRATING)],
                         ids=["peering", "transit"])
def test_no_two_boxes_overlap(n, h, make, state):
    [group] = groups(mesh_of(h, [make(i) for i in range(n)], state))
    svg = render_svg(group, page)
    polygons = [numbers(p.get("points")) for p in ET.fromstring(svg).iter(f"{SVG}polygon")]
    boxes = members_rects(svg) + [(p[10], p[1], p[4] - p[10], p[7] - p[1]) for p in polygons]  # hexagons' extents
    assert len(boxes) == len([node for node in group.nodes if not node.table]) + len(group.left_out)
    for (ax, ay, aw, ah), (bx, by, bw, bh) in itertools.combinations(boxes, 2):
        assert ax + aw <= bx or bx + bw <= ax or ay + ah <= by or by + bh <= ay


def test_a_hostile_name_is_escaped_and_the_document_stays_well_formed():
    hostile = "acme/<script>alert(\"x\")</script>&'"
    node = Node("n_x", f"{hostile}\\n<img src=x onerror=alert(1)>\\nA&B \x01bell", member=hostile)
    out = Node("n_y", "<b>left</b>\\n(left out)", member="acme/y", reason="</text><script>x</script>")
    group = Group("n_<g>", "g<&>\"' : peering", (node, Node("n_t", "Transit Gateway\\nus-east-1", gateway=True)),
                  (Edge("n_x", "n_t", "<kind>"),), (out,))
    url = "/clusters/x?a=1&b=<\"q\">'"
    svg = render_svg(group, lambda key: url)
    assert "<script" not in svg and "<img" not in svg and "<b>" not in svg and "<kind>" not in svg
    root = ET.fromstring(svg)
    text = "".join(root.itertext())
    assert hostile in text and "<img src=x onerror=alert(1)>" in text and "A&B bell" in text  # drawn as text
    assert "</text><script>x</script>" in text and "g<&>\"' : peering" in text
    assert [a.get("href") for a in root.iter(f"{SVG}a")] == [url, url]
    assert [line.find(f"{SVG}title").text for line in root.iter(f"{SVG}line")] == [f"<kind>: {hostile} to "
                                                                                    "Transit Gateway us-east-1"]
    assert root.get("aria-labelledby") == "n__g_-title"  # an id made of safe characters only


def test_the_same_fleet_draws_the_same_bytes():
    clusters = [tgw_member(i, stamp=i + 1) for i in range(5)] + [tgw_member(5, cidr="10.0.0.0/16")]
    first = [render_svg(g, page) for g in groups(mesh_of(TGW_HUB, clusters, MIGRATING))]
    again = [render_svg(g, page) for g in groups(mesh_of(TGW_HUB, list(reversed(clusters)), MIGRATING))]
    assert first == again and len(first) == 1
    assert render_svg(groups(FLEETS["a peering summary"]())[0], page) == drawn("a peering summary")[2]


def test_two_groups_drawn_on_one_page_have_distinct_ids():
    mesh = mesh_of(hub(), [member(0), member(1), member(2, group="edge"), member(3, group="edge")])
    ids = [el.get("id") for g in groups(mesh) for el in ET.fromstring(render_svg(g, page)).iter() if el.get("id")]
    assert len(ids) == 4 and len(set(ids)) == 4
