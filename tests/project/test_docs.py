"""The documentation agrees with the code and with itself."""

import dataclasses
import re

from django_rivet.workflows import HistoryEntry, WorkflowSnapshot
from tests.support.servers import ROOT

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

    tests/project/test_install_path.py builds a project from the quickstart's blocks,
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


def heading_anchors(page):
    """The anchors the docs site gives a page's headings (GitHub's slugs)."""
    anchors = set()
    for heading in re.findall(r"^#{1,4} (.+)$", page.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_docs_link_in_the_package_names_a_page_and_heading_that_exist():
    """Check hints and errors link the site with docs_url(page, section)."""
    links = set()
    for module in (ROOT / "django_rivet").rglob("*.py"):
        text = module.read_text()
        links |= set(re.findall(r'docs_url\(\s*"([\w-]+)"(?:,\s*"([\w-]+)")?', text))
    assert len(links) >= 8
    missing = []
    for page, section in sorted(links):
        path = DOCS / f"{page}.md"
        if not path.exists() or (section and section not in heading_anchors(path)):
            missing.append(f"{page}#{section}")
    assert missing == []


def test_no_message_of_the_package_points_to_a_repository_path():
    messages = []
    for module in (ROOT / "django_rivet").rglob("*.py"):
        for line in module.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("#", '"""')) or "docs/" not in stripped:
                continue
            if re.search(r'"[^"]*docs/[\w-]+\.md[^"]*"', stripped):
                messages.append(f"{module.relative_to(ROOT)}: {stripped}")
    assert messages == []
