"""A real browser for the console tests: Playwright for Python driving Debian's Chromium.

Playwright's own browser download is not used; `make test` installs `/usr/bin/chromium` (the
`browser` target). Each page records what a person would call broken: console errors, uncaught
exceptions, requests that failed, and answers with an HTTP error status.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = os.environ.get("LAKELOG_CHROMIUM", "/usr/bin/chromium")
#: Set to a folder (e.g. docs/images/console) to keep the screenshots the tests take.
SCREENSHOT_DIR = os.environ.get("LAKELOG_CONSOLE_SCREENSHOTS")


@dataclass
class Watched:
    page: object
    problems: list[str] = field(default_factory=list)
    #: HTTP error statuses a test expects (e.g. 401 for a wrong password): not counted as problems.
    expected_statuses: set[int] = field(default_factory=set)

    def clear(self) -> None:
        self.problems.clear()


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])


def watch(browser, base_url: str, *, width: int = 1280, height: int = 860) -> Watched:
    page = browser.new_page(viewport={"width": width, "height": height}, base_url=base_url)
    w = Watched(page)

    def on_console(msg) -> None:
        if msg.type == "error":
            text = msg.text
            # Chromium logs every HTTP error status as a console error; those the test expects are fine.
            if any(f"status of {s} " in text for s in w.expected_statuses):
                return
            w.problems.append(f"console error: {text}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: w.problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda req: None if "records" in req.url and req.failure == "net::ERR_ABORTED"
            else w.problems.append(f"request failed: {req.method} {req.url} {req.failure}"))
    page.on("response", lambda resp: None if resp.status < 400 or resp.status in w.expected_statuses
            else w.problems.append(f"HTTP {resp.status}: {resp.request.method} {resp.url}"))
    return w


def screenshot(page, tmp_path: Path, name: str) -> Path:
    folder = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 1000
    return path
