"""Helpers of tests/integration/test_browser.py and benchmarks/browser_vs_native.py: real headless Chromium
driven by selenium through the system chromedriver (no network: Selenium Manager is never asked)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: Flags from docs FIELD-NOTES section 3: headless as root, nothing phoning home.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1100",
)


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing: run scripts/setup_web.sh"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: run scripts/setup_web.sh"
    return None


class Chromium:
    """A headless Chromium session with a fresh profile; ``close()`` removes it."""

    def __init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = Path(tempfile.mkdtemp(prefix="edge-chromium-"))
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={self.profile}"):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        self.driver.set_script_timeout(300)

    def open(self, url: str, timeout: float = 120) -> str:
        """Load the page and wait until it is ready or failed; returns the status state."""
        self.driver.get(url)
        return self.wait_state("status", ("ready", "error"), timeout)

    def wait_state(self, element_id: str, states: tuple[str, ...], timeout: float) -> str:
        """Wait for ``#element_id[data-state]`` to take one of ``states``; TimeoutError names what it saw."""
        from selenium.webdriver.common.by import By

        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.driver.find_element(By.ID, element_id).get_attribute("data-state")
            if state in states:
                return state
            time.sleep(0.1)
        raise TimeoutError(f"#{element_id} data-state stayed {state!r} for {timeout} s; expected one of {states}")

    def upload(self, path: Path, timeout: float = 180) -> str:
        """Choose a file in the photo input, as a user would; returns #faces' final state (done or error)."""
        from selenium.webdriver.common.by import By

        self.driver.execute_script("document.getElementById('faces').dataset.state = 'waiting'")
        self.driver.find_element(By.ID, "photo").send_keys(str(path))
        return self.wait_state("faces", ("done", "error"), timeout)

    def text(self, element_id: str) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, element_id).text

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)
