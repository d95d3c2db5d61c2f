"""Every `python -m automation ...` command the README, docs/ and __main__.py show parses with the real command
line, so the docs cannot drift from the CLI (__main__.py's docstring once gave `inputs --hub HUB.yaml --cluster
FILE`, a command that does not run)."""
from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from automation.cli import build_parser
from tests.docblocks import automation_commands

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "__main__.py"]


def _subcommand_names(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    """A mention such as `python -m automation ingress render` in prose: every word names a (sub)command."""
    for word in argv:
        actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        if not actions or word not in actions[0].choices:
            return False
        parser = actions[0].choices[word]
    return True


def refusal(argv: list[str], elided: bool) -> str | None:
    """Why the real parser refuses argv (None: it parses)."""
    parser = build_parser()
    if not any(arg.startswith("-") for arg in argv) and _subcommand_names(parser, argv):  # a mention
        return None
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exit_:
        message = errors.getvalue().strip().splitlines()[-1] if errors.getvalue().strip() else ""
        if exit_.code == 0:  # --help
            return None
        if elided and "the following arguments are required" in message:
            return None  # `plan ... --policy advisory`: the arguments `...` stands for are the ones before
        return message or f"exit {exit_.code}"
    return None


def test_the_extractor_reads_commands_as_a_shell_would():
    text = ('`python -m automation plan --hub HUB.yaml --clusters PATH [--format json|tree]` and\n'
            'pulumi config set hubwright:inputs "$(python -m automation inputs --hub examples/hub.yaml \\\n'
            '    --clusters examples/clusters --cluster acme/prod-1)"\n'
            'python -m automation iam --principal <controller ARN> --hub hub.yaml  # a comment\n'
            'python -m automation api --bind 127.0.0.1:8081 & sleep 1\n')
    assert automation_commands(text) == [
        (["plan", "--hub", "HUB.yaml", "--clusters", "PATH"], False),
        (["inputs", "--hub", "examples/hub.yaml", "--clusters", "examples/clusters", "--cluster", "acme/prod-1"],
         False),
        (["iam", "--principal", "PLACEHOLDER", "--hub", "hub.yaml"], False),
        (["api", "--bind", "127.0.0.1:8081"], False)]
    # and a wrong flag is refused by the parser, naming it
    assert "--nope" in refusal(["inputs", "--hub", "h.yaml", "--clusters", "c", "--cluster", "a/b", "--nope"], False)
    assert "required" in refusal(["inputs", "--hub", "HUB.yaml", "--cluster", "FILE"], False)


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_documented_command_parses(doc):
    commands = automation_commands(doc.read_text(encoding="utf-8"))
    wrong = [f"python -m automation {' '.join(argv)}: {why}"
             for argv, elided in commands if (why := refusal(argv, elided)) is not None]
    assert not wrong, f"{doc.relative_to(ROOT)}:\n" + "\n".join(wrong)
