"""The entropy page (`healtrl inspect`, training-time views) in a real browser: Debian's headless Chromium renders it,
a screenshot shows every token's colour with legible text, and the legend; the page needs no network.

Chromium comes from `scripts/install.sh` (Debian's `chromium`). Where install.sh can install it (apt-get is there, as on
CI's machines) a missing Chromium fails the test; elsewhere the test skips, naming the fix, unless
HEALTRL_REQUIRE_BROWSER=1 is set.
"""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from healtrl.views.entropy import CompletionView, InspectRun, PromptGroup, entropy_colour, render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1280, 1400
# As /work/.library/env/machines/python.md starts it: headless, no sandbox (root), no GPU, no background traffic.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    f"--window-size={WIDTH},{HEIGHT}",
    # No network at all: every host name fails to resolve, and no proxy answers.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
]

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and shutil.which("apt-get") is None and not os.environ.get("HEALTRL_REQUIRE_BROWSER"),
    reason="Chromium is not installed: `bash scripts/install.sh` installs Debian's `chromium` (apt-get install -y "
    "chromium); the browser test of the entropy page needs it.",
)

# Tokens spanning the colour scale (max 2 nats): white, yellow, orange, red, dark red (white text above 0.7 of it).
ENTROPIES = [0.0, 0.5, 1.0, 1.5, 2.4]
TOKENS = ["The", " answer", " is", " forty", " two"]


def page() -> str:
    def completion(shift):
        ent = [min(h + shift, 2.4) for h in ENTROPIES]
        return CompletionView(
            token_ids=list(range(5)), tokens=TOKENS, entropies=ent, probs=[0.9, 0.5, 0.3, 0.2, 0.1], text="",
            truncated=False, reward=1.0,
        )  # fmt: skip

    runs = [
        InspectRun(
            model=name,
            groups=[PromptGroup(prompt="What is 6*7?", prompt_text="What is 6*7?", completions=[completion(s)] * 2)],
            temperature=1.0,
            seed=0,
        )
        for name, s in (("base", 0.0), ("trained", 0.0))
    ]
    return render_html(runs, max_entropy=2.0)


# Annotates every token span and the legend with its box and computed colours, for --dump-dom (test copy only).
PROBE = """<script>
for (const el of document.querySelectorAll('.tok, .legend .bar')) {
  const r = el.getBoundingClientRect(), s = getComputedStyle(el);
  el.setAttribute('data-probe', JSON.stringify({x: r.x, y: r.y, w: r.width, h: r.height, bg: s.backgroundColor,
    fg: s.color, font: s.fontSize, visible: s.visibility, image: s.backgroundImage}));
}
</script></body>"""


def chromium(*args, timeout=120):
    if CHROMIUM is None:
        pytest.fail("Chromium is missing (and apt-get can install it): run `bash scripts/install.sh`.")
    result = subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def rgb(css: str) -> tuple[int, int, int]:
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def hex_rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def luminance(c) -> float:
    def channel(v):
        v = v / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in c)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_page_needs_no_network():
    html = page()
    assert not re.search(r"(https?:)?//[a-z0-9]", html, re.I)  # no URL of any host
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b|@import|@font-face|url\(", html, re.I)


def test_text_contrast_over_the_whole_scale():
    """Every background of the scale gets the text colour that contrasts more: >= 4.5:1 (WCAG AA) everywhere."""
    from healtrl.views.entropy import _text_colour

    for h in np.linspace(0, 2.5, 501):
        bg = hex_rgb(entropy_colour(h, 2.0))
        assert contrast(bg, hex_rgb(_text_colour(h, 2.0))) >= 4.5, h


@needs_chromium
def test_page_renders_coloured_legible_tokens_in_chromium(tmp_path):
    html = page()
    path = tmp_path / "inspect.html"
    path.write_text(html, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE), encoding="utf-8")

    dom = chromium(f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", probe.as_uri())
    boxes = [json.loads(m.replace("&quot;", '"')) for m in re.findall(r'data-probe="([^"]+)"', dom)]
    tokens = [b for b in boxes if b["image"] == "none"]
    legend = [b for b in boxes if b["image"] != "none"]
    assert len(tokens) == 4 * len(TOKENS) and len(legend) == 1  # 2 models x 2 completions x 5 tokens
    assert "linear-gradient" in legend[0]["image"] and legend[0]["w"] >= 300 and legend[0]["h"] >= 10
    for box, h in zip(tokens, ENTROPIES * 4):
        assert box["visible"] == "visible" and box["w"] > 5 and box["h"] >= 12, box
        assert float(box["font"].rstrip("px")) >= 12  # readable size
        assert rgb(box["bg"]) == hex_rgb(entropy_colour(h, 2.0)), (h, box)
        assert contrast(rgb(box["bg"]), rgb(box["fg"])) >= 4.5, (h, box)  # WCAG AA for normal text
    assert "0 nats" in dom and "2 nats" in dom  # the legend's ends

    shot = tmp_path / "shot.png"
    chromium(f"--user-data-dir={tmp_path / 'profile-shot'}", f"--screenshot={shot}", path.as_uri())
    from PIL import Image

    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert image.shape[:2] == (HEIGHT, WIDTH)
    for box, h in zip(tokens, ENTROPIES * 4):
        if h == 0.0:
            continue  # a white token on a white card: its colour is the page's; its text is checked below
        x0, y0 = int(box["x"]) + 1, int(box["y"]) + 1
        crop = image[y0 : y0 + int(box["h"]) - 2, x0 : x0 + int(box["w"]) - 2]
        bg, fg = np.array(hex_rgb(entropy_colour(h, 2.0))), np.array(rgb(box["fg"]))
        near_bg = (np.abs(crop - bg).sum(-1) <= 6).mean()
        near_fg = (np.abs(crop - fg).sum(-1) <= 120).mean()
        assert near_bg > 0.4, (h, near_bg)  # the token's colour fills its box
        assert near_fg > 0.02, (h, near_fg)  # and its text is drawn in the text colour on it
    for box in [b for b, h in zip(tokens, ENTROPIES * 4) if h == 0.0]:  # dark text on white
        x0, y0 = int(box["x"]) + 1, int(box["y"]) + 1
        crop = image[y0 : y0 + int(box["h"]) - 2, x0 : x0 + int(box["w"]) - 2]
        assert (crop.sum(-1) < 200).mean() > 0.02
    bar = legend[0]
    row = image[int(bar["y"] + bar["h"] / 2), int(bar["x"]) + 2 : int(bar["x"] + bar["w"]) - 2]
    for stop in ("#ffeda0", "#f03b20", "#800026"):  # the legend shows the scale's colours
        assert (np.abs(row - np.array(hex_rgb(stop))).sum(-1) <= 12).any(), stop
