"""The documentation agrees with the code and with itself."""

import dataclasses
import re

from django_rivet.workflow import HistoryEntry, WorkflowSnapshot
from tests.servers import ROOT

DOCS = ROOT / "docs"


def markdown_files():
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_relative_link_points_to_a_file_that_exists():
    broken = []
    for page in markdown_files():
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_links_every_page_of_docs():
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if f"(docs/{p.name})" not in readme]
    assert missing == []


def test_the_readmes_project_files_are_the_tested_quickstarts():
    """README blocks naming a project file are copies of docs/quickstart.md's.

    tests/test_install_path.py builds a project from the quickstart's blocks,
    so the README's copies are tested through it.
    """

    def named_blocks(text):
        blocks = re.findall(r"```python\n(# mysite/.*?)```", text, re.S)
        return {block.split("\n", 1)[0]: block for block in blocks}

    readme = named_blocks((ROOT / "README.md").read_text())
    quickstart = named_blocks((DOCS / "quickstart.md").read_text())
    assert readme, "the README shows no project file"
    for first_line, block in readme.items():
        assert block == quickstart.get(first_line), first_line


def test_workflows_md_lists_what_history_and_snapshot_return():
    text = (DOCS / "workflows.md").read_text()
    history = re.search(
        r"- `h\.history\(\)` returns a list of `HistoryEntry`.*?\n- ", text, re.S
    )
    snapshot = re.search(
        r"- `h\.snapshot\(\)` returns a `WorkflowSnapshot`.*?\n\n", text, re.S
    )
    assert history and snapshot
    for cls, section in [
        (HistoryEntry, history.group(0)),
        (WorkflowSnapshot, snapshot.group(0)),
    ]:
        assert dataclasses.is_dataclass(cls)
        undocumented = [
            f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in section
        ]
        assert undocumented == [], cls.__name__
