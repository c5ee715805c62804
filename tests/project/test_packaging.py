"""The package's metadata claims what the suite runs on.

`make test` runs the suite on Python 3.11 with Django 5.2 and on Python 3.12
with the newest Django 6; this test runs in both legs, so each classifier
pair it checks is one a leg exercised.
"""

import sys
import tomllib

import django
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.servers import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_classifiers_name_the_python_and_django_this_suite_runs_on():
    classifiers = PROJECT["classifiers"]
    python = "{}.{}".format(*sys.version_info[:2])
    assert f"Programming Language :: Python :: {python}" in classifiers
    major, minor = django.VERSION[:2]
    assert f"Framework :: Django :: {major}.{minor}" in classifiers
    assert f"Framework :: Django :: {major}" in classifiers or major == 5


def test_the_metadata_links_the_docs_and_the_source():
    assert {"Documentation", "Source", "Changelog", "Issues"} <= set(PROJECT["urls"])
    assert set(PROJECT["optional-dependencies"]) >= {"redis", "client", "docs"}


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def test_every_dependency_the_suite_installs_is_pinned():
    # `make test` installs within scripts/constraints.txt; a dependency
    # missing there would take whatever was released last, and a new
    # release could turn CI red between two commits.
    pins = {
        _name(line.partition("==")[0]): line.partition("==")[2]
        for line in (ROOT / "scripts" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert all(pins.values()), "every line pins one version (name==version)"
    wanted = list(PROJECT["dependencies"])
    for requirements in PROJECT["optional-dependencies"].values():
        wanted += requirements
    missing = sorted({_name(r) for r in wanted} - set(pins))
    assert not missing, f"run scripts/constraints.sh: {missing} not pinned"
