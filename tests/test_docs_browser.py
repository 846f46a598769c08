"""The built docs site, loaded in a real headless browser (Debian's chromium, driven by Selenium).

Checks what a reader sees: every command block has a copy button (sphinx-copybutton), and no block scrolls
sideways (``docs/_static/wrap.css`` wraps long commands), on a desktop window and on a phone-sized one. A
control turns the wrapping style off in the same page and sees the longest command overflow, so the check
can fail. Without chromium the test is skipped, unless ``CI=true``: CI installs it (``.ci/run``) and must run it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

PAGES = ("source/features/multi_gpu.html", "source/refs/troubleshooting.html")
#: the flags that start chromium here: no sandbox (root in a container), no GPU, nothing from the network
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
DESKTOP, PHONE = (1280, 900), (420, 900)

#: per code block: has a copy button, and the block's content and visible widths
BLOCKS_JS = """
return [...document.querySelectorAll('div.highlight')].map(b => {
  const pre = b.querySelector('pre');
  const longest = Math.max(...pre.textContent.split('\\n').map(l => l.length));
  return {copy: b.querySelector('button.copybtn') !== null, scroll: pre.scrollWidth, client: pre.clientWidth,
          longest: longest, text: pre.textContent.slice(0, 80)};
});
"""


def _browser_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    paths = _browser_paths()
    if paths is None:
        if os.environ.get("CI") == "true":
            pytest.fail(
                "CI=true but chromium or chromedriver is missing: .ci/run installs them (apt-get install "
                "chromium chromium-driver)"
            )
        pytest.skip("chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = paths[0]
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="mgpu-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")  # a fresh profile, never the user's
        driver = webdriver.Chrome(service=Service(paths[1]), options=options)
        driver.set_page_load_timeout(60)
        try:
            yield driver
        finally:
            driver.quit()


def blocks(driver, page: Path, size: tuple[int, int]) -> list[dict]:
    """Load ``page`` in a window of ``size`` and describe its code blocks, once the page has loaded and
    sphinx-copybutton's script has run (it adds the buttons when the document is ready)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(*size)
    driver.get(page.as_uri())
    ready = (
        "return document.readyState === 'complete' && document.querySelector('div.highlight') !== null "
        "&& document.querySelector('button.copybtn') !== null"
    )
    try:
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(ready))
    except TimeoutException:
        pytest.fail(f"{page}: no code block with a copy button within 60 s of loading it")
    return driver.execute_script(BLOCKS_JS)


@pytest.mark.parametrize("page", PAGES)
def test_every_command_block_has_a_copy_button(browser, sphinx_html: Path, page: str) -> None:
    missing = [b["text"] for b in blocks(browser, sphinx_html / page, DESKTOP) if not b["copy"]]
    assert not missing, f"blocks without a copy button on {page}: {missing}"


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["desktop", "phone"])
@pytest.mark.parametrize("page", PAGES)
def test_no_command_block_scrolls_sideways(browser, sphinx_html: Path, page: str, size: tuple[int, int]) -> None:
    overflowing = [b for b in blocks(browser, sphinx_html / page, size) if b["scroll"] > b["client"]]
    assert not overflowing, f"{page} at {size[0]} px: blocks wider than their box: {overflowing}"


def test_without_the_wrapping_style_the_longest_command_overflows(browser, sphinx_html: Path) -> None:
    """The control: the page holds a command too long for its box, so the check above could fail."""
    blocks(browser, sphinx_html / PAGES[0], DESKTOP)
    assert browser.execute_script(
        "const l = document.querySelector('link[href*=\"_static/wrap.css\"]'); if (!l) return false; "
        "l.disabled = true; return true;"
    ), "the page does not load _static/wrap.css"
    after = browser.execute_script(BLOCKS_JS)
    longest = max(after, key=lambda b: b["longest"])
    assert longest["scroll"] > longest["client"], longest
