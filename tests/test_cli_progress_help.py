"""The CLI's help (examples in every command's --help, `plan` listed first, shell completion) and its progress
(a known total from the start, plain lines per stage on stderr, nothing on stdout, nothing with --json)."""

from __future__ import annotations

import json
import re
import time

import pytest
from helpers import SCENARIOS, invoke
from typer.main import get_command

from planner import api
from planner.cli import _PlainLines, _Stages, app

CONTACT_CENTER = str(SCENARIOS / "contact-center.yaml")


def _command_paths(command=None, path=()):
    """Every command and sub-command (groups included) as its argument path: (), ('plan',), ('tables', 'build')..."""
    command = command or get_command(app)
    yield path
    if hasattr(command, "commands"):  # a group (typer has its own copy of click's classes)
        for name, sub in command.commands.items():
            yield from _command_paths(sub, (*path, name))


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[planner] ")]


ALL_COMMANDS = sorted(_command_paths())


def test_the_command_list_is_complete():
    names = {" ".join(path) for path in ALL_COMMANDS}
    for expected in ("plan", "simulate", "compare", "bom", "report", "validate", "perf", "curve", "peak", "users",
                     "catalog", "sensitivity", "sweep", "ingest", "tables", "tables build", "workload",
                     "workload analyze"):  # fmt: skip
        assert expected in names


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda path: " ".join(path) or "planner")
def test_every_help_ends_with_examples(path):
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    epilog = result.stdout[result.stdout.index("Example"):]  # after the options: the examples
    assert "planner " in epilog
    assert " ".join(("planner", *path)) in epilog  # a command's own examples run it


def test_examples_keep_their_line_breaks():
    out = invoke("plan", "--help").stdout
    examples = [line.strip() for line in out[out.index("Example"):].splitlines() if "planner plan" in line]
    assert len(examples) >= 2 and all(line.startswith("planner plan ") for line in examples)


def test_plan_is_listed_first_and_completion_is_offered():
    out = invoke("--help").stdout
    panel = out[out.index("Commands"):]
    listed = re.findall(r"^│ ([a-z]+) ", panel, flags=re.MULTILINE)
    assert listed[0] == "plan", listed
    assert {"simulate", "compare", "sweep", "tables", "workload"} <= set(listed)
    assert "--install-completion" in out and "--show-completion" in out


def test_plain_progress_prints_stages_with_known_totals_on_stderr():
    result = invoke("plan", CONTACT_CENTER, "--progress", "plain")
    assert result.exit_code == 0, result.output
    assert "Plan for contact-center" in result.stdout and "13" in result.stdout
    assert "[planner]" not in result.stdout  # progress never goes to stdout
    lines = _lines(result.stderr)
    assert re.fullmatch(r"\[planner\] pricing candidates \(workload x system\): started, (\d+) steps?", lines[0])
    total = re.search(r"(\d+) steps?", lines[0]).group(1)
    assert re.fullmatch(rf"\[planner\] pricing candidates: {total}/{total} done in [\d.]+ s", lines[1])
    assert lines[2] == "[planner] solving the integer program (cbc, at most 60 s): started"
    assert re.fullmatch(r"\[planner\] solving the integer program: done in [\d.]+ s", lines[3])
    assert len(lines) == 4 and "None" not in result.stderr


def test_auto_progress_is_plain_where_stderr_is_no_terminal_and_none_is_quiet():
    result = invoke("plan", CONTACT_CENTER)
    assert result.exit_code == 0 and _lines(result.stderr)
    quiet = invoke("plan", CONTACT_CENTER, "--progress", "none")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_json_stdout_stays_one_document_with_plain_progress():
    result = invoke("plan", CONTACT_CENTER, "--json", "--progress", "plain")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "optimal"
    assert _lines(result.stderr)  # asked for: on stderr
    auto = invoke("plan", CONTACT_CENTER, "--json")  # auto with --json: no progress at all
    assert json.loads(auto.stdout)["status"] == "optimal" and not _lines(auto.stderr)


def test_the_bar_counts_known_stages_and_not_the_solve():
    result = invoke("plan", CONTACT_CENTER, "--progress", "bar", "--json")  # a bar asked for, even off a terminal
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    frames = [re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", frame).strip() for frame in result.stderr.split("\r")]
    counted = [frame for frame in frames if "pricing candidates" in frame]
    solving = [frame for frame in frames if "solving the integer program" in frame]
    assert counted and all(re.search(r" \d+/\d+ +\d+% ", frame) for frame in counted)  # done/total and percentage
    assert solving and not any(re.search(r"\d+/|%|None|-:--", frame) for frame in solving)  # elapsed time only
    assert "None" not in result.stderr and "[planner]" not in result.stderr


def test_sensitivity_names_its_stages():
    result = invoke("sensitivity", CONTACT_CENTER, "--throughput", "1,0.8", "--demand", "1", "--progress", "plain")
    assert result.exit_code == 0, result.output
    lines = _lines(result.stderr)
    assert "[planner] planning each grid point (latency x throughput x demand): started, 2 steps" in lines
    assert any(re.fullmatch(r"\[planner\] planning each grid point: 2/2 done in [\d.]+ s", line) for line in lines)


def _stages(calls) -> list[list[tuple]]:
    """The calls split where a phase starts a stage, less the stages that price curves before the enumeration (the
    bound's first pass with one process: 'pricing 2 leading engine curves here')."""
    stages: list[list[tuple]] = [[]]
    for call in calls:
        if len(call) > 2 and call[2] is not None:
            stages.append([call])
        else:
            stages[-1].append(call)
    return [stage for stage in stages if stage and " engine curves " not in stage[0][2]]


def test_the_candidate_stage_reports_its_total_from_the_start():
    calls = []
    api.plan_file(SCENARIOS / "chat-and-summarize.yaml", progress=lambda *args: calls.append(args))
    candidates, solve = _stages(calls)
    total = candidates[0][1]
    # named and known before the first workload x system pair
    assert candidates[0][:2] == (0, total) and total > 1
    assert re.fullmatch(r"pricing candidates \(workload x system(; .+)?\)", candidates[0][2])
    assert all(call[1] == total for call in candidates)  # never None
    assert [call[0] for call in candidates] == list(range(total + 1))  # by 1, never back
    assert solve == [(0, None, "solving the integer program (cbc, at most 60 s)")]


def test_the_candidate_stage_counts_the_curves_priced_and_the_curves_kept(tmp_path, monkeypatch):
    """The stage's name tallies the modeled engine curves: all priced on a cold cache, all kept when re-run."""
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "cache"))
    names = []
    for _ in range(2):
        calls = []
        api.plan_file(SCENARIOS / "chat-and-summarize.yaml", progress=lambda *args: calls.append(args))
        names.append(_stages(calls)[0][0][2])
    cold = re.fullmatch(r"pricing candidates \(workload x system; (\d+) modeled engine curves: (\d+) priced (?:here as reached|on \d+ processes)"
                        r"(, (\d+) left unpriced, dominated by a bound)?\)", names[0])  # fmt: skip
    assert cold and cold[1] == cold[2], names[0]
    assert names[1] == f"pricing candidates (workload x system; {cold[1]} modeled engine curves: {cold[1]} kept from earlier runs{cold[3] or ''})"


def test_sweep_progress_moves_by_one_point_on_several_workers():
    from planner.sweep import load_sweep, run_sweep

    calls = []
    sweep = load_sweep(SCENARIOS / "sweeps" / "summarize-tpot.yaml")
    records = run_sweep(sweep, "process", 2, lambda *args: calls.append(args))
    total = len(sweep.points)
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [done for done, _ in calls] == list(range(total + 1))
    assert [r["point"] for r in records] == list(range(total))


class _Recorder:
    def __init__(self):
        self.events = []

    def start(self, name, total, again):
        self.events.append(("start", name, total, again))

    def advance(self, name, done, total, elapsed):
        self.events.append(("advance", done, total))

    def finish(self, name, done, total, elapsed):
        self.events.append(("finish", name, done, total))


def test_stages_start_finish_and_restart():
    display = _Recorder()
    stages = _Stages("simulating", display)
    for round_ in range(2):  # a repair simulates again: the stage starts again
        for done in range(3):
            stages(done, 2)
    stages(0, None, "solving")
    stages.close()
    assert display.events == [
        ("start", "simulating", 2, False), ("advance", 1, 2), ("finish", "simulating", 2, 2),
        ("start", "simulating", 2, True), ("advance", 1, 2), ("finish", "simulating", 2, 2),
        ("start", "solving", None, False), ("finish", "solving", 0, None),
    ]  # fmt: skip


def test_plain_lines_of_a_long_stage_are_at_most_every_ten_percent_and_five_seconds(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    for seconds_per_step, expected in ((1.0, 9), (0.01, 0), (20.0, 9)):
        stages = _Stages("planning sweep points", _PlainLines())
        for done in range(101):
            stages(done, 100)
            clock[0] += seconds_per_step
        lines = _lines(capsys.readouterr().err)
        middle = lines[1:-1]
        assert len(middle) == expected, lines
        assert lines[0] == "[planner] planning sweep points: started, 100 steps"
        assert lines[-1].startswith("[planner] planning sweep points: 100/100 done in ")
        for line in middle:
            assert re.fullmatch(r"\[planner\] planning sweep points: \d+/100 \(\d+%\), .+ elapsed, about .+ left", line)


def test_one_command_app_parses_helps_and_fails_as_the_whole_app(monkeypatch):
    """`planner COMMAND ...` builds only that command (start-up, issue 46): the same help, errors and exit codes."""
    import typer.testing
    from typer.testing import CliRunner

    from planner.cli import _one_command_app, app

    for args in (["plan", "--help"], ["plan", "--bogus", "x.yaml"], ["plan"], ["plan", "missing.yaml"], ["validate", "--help"]):
        whole = CliRunner().invoke(app, args)
        one = _one_command_app(args)
        assert one is not None and list(one.commands) == [args[0]]
        with monkeypatch.context() as patch:
            patch.setattr(typer.testing, "_get_command", lambda _app: one)
            alone = CliRunner().invoke(app, args)
        assert (alone.exit_code, alone.stdout, alone.stderr) == (whole.exit_code, whole.stdout, whole.stderr), args
    for args in ([], ["--help"], ["plna", "x.yaml"], ["tables", "--help"]):
        assert _one_command_app(args) is None, args


def test_reading_a_plan_file_says_it_recomputes_its_figures_then_simulates(tmp_path):
    """`simulate --plan`: the pricing that recomputes the file's performance figures is named as such, and the
    simulation after it is its own stage (not the pricing 'started again')."""
    saved = invoke("plan", CONTACT_CENTER, "--json", "--progress", "none")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(saved.stdout)
    result = invoke("simulate", CONTACT_CENTER, "--plan", str(plan_path), "--duration", "30", "--progress", "plain")
    assert result.exit_code == 0, result.output
    lines = _lines(result.stderr)
    assert lines[0].startswith("[planner] recomputing the plan file's performance figures: pricing candidates")
    assert any(line.startswith("[planner] simulating (workload x period): started") for line in lines), lines
    assert not any("started again" in line for line in lines), lines
