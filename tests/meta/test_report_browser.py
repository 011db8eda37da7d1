"""report.html in a real browser: Debian's headless Chromium, driven through chromedriver (WebDriver).

``.ci/run`` installs the ``chromium`` and ``chromium-driver`` packages where they are missing.  Outside CI
a machine without them skips this test; in CI (``CI`` set) their absence is a failure, so a broken
install never passes unnoticed.
"""

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
VIEWPORT = (1280, 900)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        missing = "chromium" if CHROMIUM is None else "chromedriver"
        if os.environ.get("CI"):
            pytest.fail(f"{missing} is not installed: .ci/run installs Debian's chromium and chromium-driver")
        pytest.skip(f"{missing} is not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def test_the_verdict_and_the_matrix_are_visible_on_opening(browser, matrix_report, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get((matrix_report["dir"] / "report.html").as_uri())
    verdict = browser.find_element(By.ID, "verdict")
    assert verdict.is_displayed() and "non-conformant" in verdict.text
    assert verdict.rect["y"] < VIEWPORT[1] / 4  # the first thing on the page
    matrix = browser.find_element(By.CSS_SELECTOR, "#matrix table.matrix")
    assert matrix.is_displayed() and matrix.rect["y"] < VIEWPORT[1]  # starts in the first screen
    headers = [th.text for th in matrix.find_elements(By.CSS_SELECTOR, "thead th")]
    assert headers[:3] == ["contract", "variant", "subset (cpu)"] and "flushes (cpu)" in headers
    link = matrix.find_element(By.CSS_SELECTOR, "td.cell.s-fail a")  # a row's cell (a contract's is no link)
    cell = link.find_element(By.XPATH, "..")
    assert cell.is_displayed() and cell.text.startswith("FAIL")
    colour = cell.value_of_css_property("background-color")
    assert colour in ("rgba(255, 235, 233, 1)", "rgb(255, 235, 233)")  # the stylesheet is inline and applied
    link.click()  # the cell links to its counterexample
    target = browser.execute_script("return document.getElementById(decodeURIComponent(location.hash.slice(1)))")
    assert target is not None and "0x80" in target.text
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
