"""The docs a user reads hold together: every relative link in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/
resolves (the file, and the heading it points at), the README stays short, and user docs carry no issue numbers,
no notes about the machine they were written on, and none of the contradictions a reader once found."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
               *(ROOT / "docs").rglob("*.md")])
USER_DOCS = [doc for doc in DOCS if doc.name not in ("CHANGELOG.md",)]  # history names what it replaced
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)|!\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|````).*?^\1\s*$", re.S | re.M)
INLINE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^(#+)\s+(.*?)\s*$", re.M)


def prose(text: str) -> str:
    """The text outside code: fences and inline code removed (a link inside them is not a link)."""
    return INLINE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(doc: Path) -> list[str]:
    return [m[1] or m[2] for m in LINK.finditer(prose(doc.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_a_heading(doc):
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, oci:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}:\n  " + "\n  ".join(broken)


def test_the_link_check_sees_what_it_checks():
    """The checker itself: a link to a missing heading, one in code, and GitHub's anchor rules."""
    assert slug("`pulumi up` by hand, for one cluster") == "pulumi-up-by-hand-for-one-cluster"
    assert slug("Scale: 1,000 and 10,000 clusters") == "scale-1000-and-10000-clusters"
    assert slug("Door 2: a kustomize overlay, Argo CD") == "door-2-a-kustomize-overlay-argo-cd"
    assert links_in("see [a](x.md#y) and `[b](z.md)`\n```\n[c](w.md)\n```\n") == ["x.md#y"]
    assert "docs/quickstart.md" in links(ROOT / "README.md")


def links_in(text: str) -> list[str]:
    return [m[1] or m[2] for m in LINK.finditer(prose(text))]


def test_the_readme_is_short_and_leads_to_install_try_it_the_parts_and_the_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    headings = [m[2] for m in HEADING.finditer(text)]
    for wanted in ("Prerequisites", "Install from a release", "Try it offline", "The parts", "The docs, by reader",
                   "Where to start reading the code"):
        assert wanted in headings, wanted
    for page in ("docs/install.md", "docs/quickstart.md", "docs/configuration.md", "docs/upgrading.md",
                 "docs/monitoring.md", "docs/troubleshooting.md", "CONTRIBUTING.md", "docs/reference/hubconfig.md"):
        assert page in links(ROOT / "README.md"), page


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_user_docs_carry_no_issue_numbers_and_no_machine_notes(doc):
    text = prose(doc.read_text(encoding="utf-8"))
    assert not re.findall(r"(?<![\w/&])#\d+\b|\bissue \d+", text), "issue numbers belong in CHANGELOG.md"
    assert not re.findall(r"(?i)\bthis machine\b|\bour build machines?\b|on final main", text)


def test_the_contradictions_a_reader_found_are_gone():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "six layers" in readme and "hubwright is six layers" in architecture
    assert "four layers" not in readme + architecture
    for text in (readme, architecture):
        assert "on every watch event" not in text  # the service is incremental (stacks/incremental.py)
    # the folder map names every package under automation/
    packages = {p.name for p in (ROOT / "automation").iterdir() if (p / "__init__.py").exists()}
    assert {f"automation/{name}/" for name in packages} <= set(re.findall(r"`(automation/\w+/)`", readme))
