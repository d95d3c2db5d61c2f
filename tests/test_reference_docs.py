"""The reference pages (docs/reference/hubconfig.md, hubcluster.md) are what `python -m automation reference --write`
generates from the model: never stale, one entry for every field of the model, and a field without a description
fails by its path."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from stacks import reference
from stacks.crds import hubconfig_crd
from stacks.model.hub import HubConfigSpec
from automation.cli import main as cli
from automation.cli.reference import stale
from stacks.reference import COMMAND, PAGES, Page, model_fields, render, undescribed
from stacks.status import HubStatus

ROOT = Path(__file__).resolve().parent.parent
IDS = [Path(page.path).stem for page in PAGES]


def _fields_of(page: Page) -> list[str]:
    return [path for model, top in ((page.spec, "spec"), (page.status, "status"))
            for path, _ in model_fields(model, top)]


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_the_checked_in_page_is_what_the_renderer_writes(page: Page) -> None:
    path = ROOT / page.path
    assert path.is_file(), f"{page.path} is missing: {COMMAND}"
    kept, now = path.read_text(encoding="utf-8").splitlines(), render(page).splitlines()
    first = next((i for i, (a, b) in enumerate(zip(kept, now)) if a != b), min(len(kept), len(now)))
    assert kept == now, (f"{page.path} is stale (line {first + 1}: "
                         f"{kept[first] if first < len(kept) else '(end)'!r} should be "
                         f"{now[first] if first < len(now) else '(end)'!r}): {COMMAND}")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_field_of_the_model_has_a_description(page: Page) -> None:
    missing = undescribed(page.spec, "spec") + undescribed(page.status, "status")
    assert not missing, (f"fields without a description (give each Field a description=..., then {COMMAND}): "
                         f"{', '.join(missing)}")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_field_of_the_model_has_an_entry_and_every_entry_is_a_field(page: Page) -> None:
    text = (ROOT / page.path).read_text(encoding="utf-8")
    entries = re.findall(r"^### `([^`]+)`$", text, flags=re.M)
    fields = _fields_of(page)
    assert len(entries) == len(set(entries))
    assert not set(fields) - set(entries), f"not on {page.path}: {sorted(set(fields) - set(entries))}: {COMMAND}"
    assert not set(entries) - set(fields), f"on {page.path} but not in the model: {sorted(set(entries) - set(fields))}"
    assert len(fields) > 100


def test_the_pages_say_what_the_model_says() -> None:
    """Spot checks, one per kind of fact: type, required, a schema default, a factory's default, constraints, words."""
    hub = render(PAGES[0])
    cluster = render(PAGES[1])
    assert f"by `{COMMAND}`" in hub.splitlines()[0]
    assert ("### `spec.accountID`\n\n`string` · required · pattern `^(?:\\d{12})$` · at most 12 characters\n\n"
            "The hub account: where the endpoint VPCs are (12 digits, quoted in YAML).\n") in hub
    assert ("### `spec.mesh.groups.*.topology`\n\n`string` · optional · default `\"peering\"` · "
            "one of `\"peering\"`, `\"transitGateway\"`, `\"auto\"`\n") in hub
    # Defaults made by factories, which the CRD's schema leaves out: from the model's field.
    assert "### `spec.endpointVPCInventory`\n\n`[]object` · optional · default `[]` · at most 1000 items\n" in hub
    assert 'default `[{"key": "sigs.k8s.io/cluster-api-provider-aws/role", "value": "node"}, ' in hub
    assert "### `spec.sharedIngress`\n\n`object` · optional\n" in hub  # None: off, no default
    assert "### `spec.endpointVPCInventory[].subnets[].subnetID`\n\n`string` · required" in hub
    assert "### `spec.credentials.sessionDurationSeconds`\n\n`integer` · optional · 900 to 43200\n" in hub
    assert "each value: pattern `^[0-9A-Za-z_.:/=+\\-@ ]*$`, at most 256 characters" in cluster
    assert "The API server refuses a spec that breaks `!has(oldSelf.network) || has(self.network)`" in cluster
    assert "| scope | Namespaced; `metadata.name`: at most 98 characters |" in cluster


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_the_prose_is_escaped_for_markdown(page: Page) -> None:
    """A description's <infraID> would be read as an HTML tag, its aws:* as emphasis: outside code, both escaped."""
    text = render(page)
    prose = re.sub(r"``.*?``|`[^`\n]*`", "", text.split("\n## spec\n", 1)[1])  # the fields' words, outside code
    assert not re.search(r"(?<!\\)[<*\[\]]", prose)
    if page.spec.__name__ == "ClusterSpec":
        assert "Unset: \\<infraID>-int, the installer's." in text and "never aws:\\*, hubwright.io/\\* or Name" in text


def test_a_field_without_a_description_is_named() -> None:
    """The checks are not vacuous: an undescribed field, nested in a list, fails by its path, in the model and in
    the schema the page is rendered from."""
    class Inner(BaseModel):
        said: int = Field(0, description="Described.")
        unsaid: int = 0

    class Outer(BaseModel):
        items: list[Inner] = Field(default_factory=list, description="Described.")

    assert undescribed(Outer, "spec") == ["spec.items[].unsaid"]

    def bare() -> dict:
        crd = copy.deepcopy(hubconfig_crd())
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del spec["properties"]["mesh"]["properties"]["groups"]["additionalProperties"]["properties"]["rules"][
            "description"]
        return crd

    with pytest.raises(ValueError, match=r"spec\.mesh\.groups\.\*\.rules has no description"):
        render(Page("docs/reference/hubconfig.md", bare, HubConfigSpec, HubStatus))


def test_a_schema_keyword_the_renderer_does_not_know_is_an_error() -> None:
    def odd() -> dict:
        crd = copy.deepcopy(hubconfig_crd())
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["region"][
            "format"] = "hostname"
        return crd

    with pytest.raises(ValueError, match="cannot render: format"):
        render(Page("docs/reference/hubconfig.md", odd, HubConfigSpec, HubStatus))


def test_stale_names_an_edited_and_a_missing_page(tmp_path: Path) -> None:
    for path, text in reference.pages().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert stale(tmp_path) == []
    edited = tmp_path / PAGES[0].path
    edited.write_text(edited.read_text(encoding="utf-8").replace("The hub account:", "The account:"), encoding="utf-8")
    (tmp_path / PAGES[1].path).unlink()
    assert stale(tmp_path) == [PAGES[0].path, PAGES[1].path]


def test_the_command_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m automation reference --write` writes the pages (into another root here) and `--check` then finds
    none stale; after an edit it names the page and the command, and exits 1."""
    root = ["--root", str(tmp_path)]
    assert cli(["reference", "--write", *root]) == 0
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.md")) == sorted(p.path for p in PAGES)
    assert cli(["reference", "--check", *root]) == 0
    page = tmp_path / PAGES[1].path
    page.write_text(page.read_text(encoding="utf-8") + "an edit\n", encoding="utf-8")
    capsys.readouterr()
    assert cli(["reference", "--check", *root]) == 1
    assert capsys.readouterr().err == f"{PAGES[1].path} is stale: {COMMAND}\n"
    with pytest.raises(SystemExit):
        cli(["reference", *root])  # --write or --check: nothing is written by default
