"""The README's two set-up commands are what CI runs."""

from __future__ import annotations

import re

from helpers import ROOT


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", setup)


def test_readme_has_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].startswith("pip install .") and "planner plan scenarios/" in commands[0]
    assert "[test]" in commands[1] and "pytest" in commands[1]


def test_ci_runs_exactly_the_readme_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    for command in _readme_commands():
        assert command in ci


def test_readme_scenario_exists():
    scenario = re.search(r"planner plan (\S+)", _readme_commands()[0]).group(1)
    assert (ROOT / scenario).is_file()
