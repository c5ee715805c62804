"""The README's code runs as written."""

import importlib.util
import re

from tests.support.servers import ROOT

README = ROOT / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_testing_example_passes(db, tmp_path):
    (block,) = [b for b in python_blocks() if "class Reminder" in b]
    path = tmp_path / "readme_example.py"
    path.write_text(block)
    spec = importlib.util.spec_from_file_location("readme_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_reminder_rings_once_its_time_has_come()


def test_the_first_commands_are_make_run_and_make_test():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands[:2] == ["make run", "make test"]
    assert text.index("```sh") < text.index("```python")
