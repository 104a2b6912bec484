"""Checks of a written report.html shared by tests/engine/tools/test_report.py and tests/e2e/test_replay_modes.py: every figure
a decodable, non-blank PNG whose axis labels the page names, and a headless Chromium screenshot of the page."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import pytest

TITLES = [
    "Win rate", "Learnable share of the environment budget (Figure 6)", "Diversity", "Validation pass rate",
    "Valid designs per refresh, fresh and edited", "Groups with variance", "Rejection reasons",
    "Formula reveal", "Reward granularity", "Regret and designer reward", "Learner loss", "Generation tokens/s", "Staleness",
    "Win rate by skill", "Time per step, by phase",
]


def _images(page: str) -> list[tuple[str, str, str, bytes]]:
    found = re.findall(r"<img src='data:image/png;base64,([^']+)' alt='([^']*)' width='520' height='320' data-xlabel='([^']*)' data-ylabel='([^']*)'>", page)
    return [(alt, x, y, base64.b64decode(data)) for data, alt, x, y in found]


def assert_not_blank(png: bytes, size=None) -> None:
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if size:
        assert image.size == size
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20, "a blank or one-colour image"
    white = max(count for count, colour in colours if colour == (255, 255, 255)) if any(c == (255, 255, 255) for _, c in colours) else 0
    assert white < 0.99 * image.size[0] * image.size[1]


def check_report(page: str) -> None:
    images = _images(page)
    assert [alt for alt, *_ in images] == TITLES
    for alt, xlabel, ylabel, png in images:
        assert xlabel and ylabel, alt
        assert f"{alt}: x {xlabel}, y {ylabel}</figcaption>" in page.replace("&#x27;", "'")
        assert_not_blank(png, (520, 320))
    assert "learnable share (win rate in [0.2, 0.8])" in page and "Vendi score / n" in page and "failed check" in page


def screenshot(page_file, png_file, tmp_path) -> bytes:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}", f"--screenshot={png_file}",
         "--window-size=1280,4000", page_file.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0 and png_file.is_file(), result.stderr[-2000:]
    return png_file.read_bytes()
