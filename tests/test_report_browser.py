"""The HTML report in a real browser (issue 20): the page renders, every image loads, the console stays silent.

Chromium headless through Playwright where it can start one (its own browser build, or the system's chromium),
else the system's `chromium --headless` directly; skipped when neither is installed. A control page with a
broken image and a console error proves each check can fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planner import api
from planner.report.document import build_report, write_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHECK_SCRIPT = (
    "<script>window.addEventListener('load', () => { const images = [...document.images]; "
    "const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).length; "
    "document.title = 'CHECK images=' + images.length + ' broken=' + broken + "
    "' height=' + document.body.scrollHeight; });</script>"
)
CONTROL_PAGE = (
    "<!DOCTYPE html><html><head><meta charset='utf-8'><title>control</title></head><body><p>control</p>"
    "<img src='data:image/png;base64,AAAA' alt='broken'><script>console.error('control error');</script></body></html>"
)


def _system_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def _playwright_browser():
    """(playwright, browser) or None: Playwright's own chromium, else the system's."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    runner = sync_playwright().start()
    for options in ({}, {"executable_path": _system_browser(), "args": ["--no-sandbox"]}):
        if "executable_path" in options and not options["executable_path"]:
            continue
        try:
            return runner, runner.chromium.launch(**options)
        except Exception:  # no browser build for Playwright here: try the next way
            continue
    runner.stop()
    return None


class PageCheck:
    """What the browser saw: images on the page, how many did not load, console messages, page height."""

    def __init__(self, images: int, broken: int, console: list[str], height: int, screenshot: bytes):
        self.images, self.broken, self.console, self.height, self.screenshot = images, broken, console, height, screenshot


def _check_with_playwright(browser, page_path: Path) -> PageCheck:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    messages: list[str] = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.goto(page_path.as_uri())
    page.wait_for_load_state("load")
    states = page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
    height = page.evaluate("document.body.scrollHeight")
    shot = page.screenshot(full_page=False)
    page.close()
    return PageCheck(len(states), states.count(False), messages, height, shot)


def _check_with_cli(browser: str, page_path: Path, tmp: Path) -> PageCheck:
    common = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
              f"--user-data-dir={tmp / 'profile'}"]  # fmt: skip
    env = {**os.environ, "HOME": str(tmp)}
    # 1) the page as shipped: its console (chromium logs every console message as CONSOLE) and a screenshot
    shot = tmp / "shot.png"
    run = subprocess.run([*common, "--enable-logging=stderr", "--v=0", "--window-size=1280,900",
                          f"--screenshot={shot}", page_path.as_uri()],
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    # 2) a copy with a probe script: how many images loaded, read back from the DOM
    probe = page_path.with_name(page_path.stem + "-probe.html")
    probe.write_text(page_path.read_text(encoding="utf-8").replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    dom = subprocess.run([*common, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120, env=env).stdout  # fmt: skip
    found = re.search(r"<title>CHECK images=(\d+) broken=(\d+) height=(\d+)</title>", dom)
    assert found, f"the probe did not run in {browser}: {dom[:300]!r}"
    images, broken, height = (int(v) for v in found.groups())
    return PageCheck(images, broken, console, height, shot.read_bytes() if shot.exists() else b"")


@pytest.fixture(scope="module")
def browser_check():
    """A function page_path -> PageCheck, by Playwright or the system's chromium; skip when there is neither."""
    found = _playwright_browser()
    if found is not None:
        manager, browser = found
        yield lambda path, tmp: _check_with_playwright(browser, path)
        browser.close()
        manager.stop()
        return
    system = _system_browser()
    if system is None:
        pytest.skip("no headless browser installed (Playwright's chromium or a system chromium / chrome)")
    yield lambda path, tmp: _check_with_cli(system, path, tmp)


def _blank(png: bytes) -> bool:
    import io

    from matplotlib import image

    pixels = image.imread(io.BytesIO(png))
    return float(pixels[..., :3].std()) < 0.01


@pytest.mark.parametrize("scenario", ["scenarios/daily-hybrid.yaml", "scenarios/chat-and-summarize.yaml"])
def test_report_renders_in_a_browser_with_every_image_and_a_silent_console(browser_check, scenario, tmp_path):
    folder = tmp_path / "report"
    report = build_report(api.plan_in_context(scenario))
    figures = len(report.figures())
    write_report(report, folder)
    seen = browser_check(folder / "report.html", tmp_path)
    assert seen.images == figures, f"{seen.images} images on the page, {figures} figures in the report"
    assert seen.broken == 0, f"{seen.broken} images did not load"
    assert seen.console == [], f"console messages: {seen.console}"
    assert seen.height > 3000, "the page rendered its sections and plots"
    assert seen.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and not _blank(seen.screenshot)


def test_the_browser_checks_can_fail(browser_check, tmp_path):
    """A page with a broken image and a console error is caught: the checks above are not vacuous."""
    page = tmp_path / "control.html"
    page.write_text(CONTROL_PAGE, encoding="utf-8")
    seen = browser_check(page, tmp_path)
    assert seen.images == 1 and seen.broken == 1
    assert any("control error" in line for line in seen.console)


def test_decision_report_renders_in_a_browser(browser_check, tmp_path):
    """The decision report (issue 34) of the two-site, two-GPU scenario, with its comparison and a short
    simulation's verdict: every table and image renders, the console stays silent."""
    from planner.simulate import SimulationOptions

    planned, inputs = api.decision_report("scenarios/chat-and-code-decision.yaml",
                                          verify_options=SimulationOptions(duration_s=30.0, seeds=1))  # fmt: skip
    report = build_report(planned, inputs)
    figures = len(report.figures())
    folder = tmp_path / "report"
    write_report(report, folder)
    page = (folder / "report.html").read_text(encoding="utf-8")
    for title in ("Decision summary", "On-prem, cloud and hybrid", "Latency against the limits, per engine",
                  "Simulation verdict", "Assumptions and their sources"):  # fmt: skip
        assert f"<h2>{title}</h2>" in page
    seen = browser_check(folder / "report.html", tmp_path)
    assert seen.images == figures and seen.broken == 0, f"{seen.images} images, {seen.broken} broken of {figures}"
    assert seen.console == [], f"console messages: {seen.console}"
    assert seen.height > 3000 and not _blank(seen.screenshot)
