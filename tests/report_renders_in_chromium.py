#!/usr/bin/env python3
"""The HTML report of `tdyn analyze` renders in headless Chromium (ctest: report_renders_in_chromium).

1. Makes a small analysis: `tdyn analyze` of stories260K with 8 samples of 32 tokens when the shared test data is
   there (about 4 s), otherwise `tdyn demo` (about 7 s, needs nothing). TDYN_RENDER_SOURCE=demo forces the demo.
2. Checks the page without a browser: every <img> is a relative path to a well-formed SVG with a viewBox and
   something drawn in it, and every other relative link (.dat, .gp, .npy, results.json) exists.
3. Loads the page in Chromium inside a small check page (an iframe; the report itself is not modified) and asks
   the browser whether every image loaded and decoded, and whether the page fits 1280 px without a horizontal
   scrollbar. The check page also holds a deliberately missing image, which must fail, so a check that cannot
   fail is caught.
4. Takes a 1280 x 4000 screenshot of the page and checks that it is a valid PNG of that size, not blank (many
   colours, enough ink), and that the figures' own colours (gnuplot's line colours) are on it.
5. Does 2 to 4 again for `tdyn compare` of that analysis with a power run of aidreams260K (a model of another
   depth; the analysis alone without the shared data), whose figures lie below its verdict table: a taller shot.

Exits 77 (ctest: skipped) when chromium, numpy or gnuplot is missing. Environment: TDYN_CLI (the tdyn executable; set by
ctest), TDYN_SHARED, TDYN_CHROMIUM (the browser), TDYN_KEEP=1 keeps the temporary directory.
"""
import html
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

SKIP = 77
HERE = pathlib.Path(__file__).resolve().parent
SOURCE = pathlib.Path(os.environ.get("TDYN_SOURCE_DIR", HERE.parent))
WIDTH, HEIGHT = 1280, 4000
# gnuplot 5's first line colours: every tdyn figure draws with some of them, and the page's CSS uses none.
GNUPLOT_COLOURS = [(0x94, 0x00, 0xD3), (0x00, 0x9E, 0x73), (0x56, 0xB4, 0xE9), (0xE6, 0x9F, 0x00)]


def skip(message):
    print(f"SKIP: {message}")
    sys.exit(SKIP)


def find_browser():
    if os.environ.get("TDYN_CHROMIUM"):
        return os.environ["TDYN_CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def find_cli():
    if os.environ.get("TDYN_CLI"):
        return os.environ["TDYN_CLI"]
    return str(SOURCE / "build" / "tdyn")


def shared_dir():
    if os.environ.get("TDYN_SHARED"):
        return pathlib.Path(os.environ["TDYN_SHARED"])
    return SOURCE.parent / "shared"


def run(argv, timeout, **kwargs):
    """Runs argv in its own process group and kills the whole group (Chromium's helpers too) on timeout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"timed out after {timeout} s: {' '.join(argv)}")
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def make_analysis(tmp):
    """The analyze directory holding index.html."""
    cli = find_cli()
    if not os.access(cli, os.X_OK):
        raise AssertionError(f"tdyn executable not found: {cli} (set TDYN_CLI)")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    model = shared_dir() / "models" / "stories260K" / "stories260K.bin"
    corpus = shared_dir() / "data" / "wikitext-2" / "wiki.test.raw"
    if os.environ.get("TDYN_RENDER_SOURCE", "") != "demo" and model.exists() and corpus.exists():
        out = tmp / "analysis"
        argv = [cli, "--threads", "1", "--quiet", "analyze", str(model), "--data", str(corpus), "--samples", "8",
                "--max-len", "32", "--out", str(out)]
    else:
        out = tmp / "demo" / "analysis"
        argv = [cli, "--threads", "1", "--quiet", "demo", "--out", str(tmp / "demo")]
    code, stdout, stderr = run(argv, 300, env=env)
    if code != 0 or not (out / "index.html").exists():
        raise AssertionError(f"{' '.join(argv)} failed with exit code {code}:\n{stdout}\n{stderr}")
    print(f"analysis: {' '.join(argv)}")
    return out


def make_comparison(tmp, analysis):
    """The compare directory holding index.html: the analysis beside a model of another depth when there is one."""
    cli = find_cli()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    runs = [str(analysis)]
    other = shared_dir() / "models" / "aidreams260K" / "aidreams260K.bin"
    if other.exists() and os.environ.get("TDYN_RENDER_SOURCE", "") != "demo":
        argv = [cli, "--threads", "1", "--quiet", "power", str(other), "--samples", "8", "--max-len", "32", "--out", str(tmp / "aidreams")]
        code, stdout, stderr = run(argv, 120, env=env)
        assert code == 0, f"{' '.join(argv)} failed with exit code {code}:\n{stdout}\n{stderr}"
        runs.append(str(tmp / "aidreams"))
    argv = [cli, "--quiet", "compare", *runs, "--out", str(tmp / "compare")]
    code, stdout, stderr = run(argv, 120, env=env)
    assert code == 0, f"{' '.join(argv)} failed with exit code {code}:\n{stdout}\n{stderr}"
    print(f"comparison: {' '.join(argv)}")
    return tmp / "compare"


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.hrefs = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        elif tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


def check_files(report):
    """Every figure is a relative path to a real SVG; every relative link exists. Returns the image sources."""
    links = Links()
    links.feed((report / "index.html").read_text(encoding="utf-8"))
    assert links.images, "the report shows no figures"
    for src in links.images:
        assert src and not src.startswith("/") and ":" not in src, f"figure path is not relative: {src!r}"
        path = report / urllib.parse.unquote(src)
        assert path.is_file(), f"figure missing: {src}"
        root = ET.parse(path).getroot()  # raises on malformed XML
        assert root.tag in ("svg", "{http://www.w3.org/2000/svg}svg"), f"{src}: root element is {root.tag}, not svg"
        has_size = root.get("viewBox") or (root.get("width") and root.get("height"))
        assert has_size, f"{src}: no viewBox and no width/height"
        drawn = sum(1 for e in root.iter() if e.tag.rsplit("}", 1)[-1] in ("path", "line", "polyline", "circle",
                                                                            "rect", "text", "use", "polygon"))
        assert drawn >= 10, f"{src}: only {drawn} drawing elements"
    for href in links.hrefs:
        if href.startswith("#"):
            continue
        assert ":" not in href and not href.startswith("/"), f"link leaves the directory: {href!r}"
        assert (report / urllib.parse.unquote(href.split("#")[0])).exists(), f"broken link: {href}"
    print(f"files: {len(links.images)} figures are valid SVG files; {len(links.hrefs)} links resolve")
    return links.images


CHECK_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"></head><body>
<pre id="result">pending</pre>
<img id="control" src="this-file-does-not-exist.svg" alt="">
<iframe id="report" src="%s" style="width:%dpx;height:20000px;border:0"></iframe>
<script>
const out = document.getElementById('result');
const settle = img => img.decode().then(() => true, () => false);
document.getElementById('report').addEventListener('load', async () => {
  try {
    const doc = document.getElementById('report').contentDocument;
    const images = Array.from(doc.images);
    images.forEach(img => { img.loading = 'eager'; });  // the report's figures load lazily
    const loaded = await Promise.all(images.map(settle));
    out.textContent = JSON.stringify({
      control: await settle(document.getElementById('control')),
      title: doc.title,
      scrollWidth: doc.documentElement.scrollWidth,
      height: Math.round(doc.body.getBoundingClientRect().height),
      images: images.map((img, i) => ({src: img.getAttribute('src'), loaded: loaded[i], width: img.naturalWidth,
                                       height: img.naturalHeight}))});
  } catch (e) {
    out.textContent = 'ERROR ' + e;
  }
});
</script></body></html>
"""

COMMON_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--mute-audio", "--hide-scrollbars"]


def browser_check(browser, report, tmp, expected, title="tdyn report"):
    page = report.parent / f"render-check-{os.getpid()}.html"
    page.write_text(CHECK_PAGE % (html.escape(os.path.relpath(report / "index.html", page.parent)), WIDTH))
    argv = [browser, *COMMON_FLAGS, f"--user-data-dir={tmp / 'profile-dom'}", "--allow-file-access-from-files",
            "--virtual-time-budget=20000", f"--window-size={WIDTH},1000", "--dump-dom", page.as_uri()]
    code, stdout, stderr = run(argv, 120)
    match = re.search(r'<pre id="result">(.*?)</pre>', stdout, re.S)
    assert code == 0 and match, f"chromium --dump-dom failed (exit code {code}):\n{stdout[-2000:]}\n{stderr[-2000:]}"
    text = html.unescape(match.group(1))
    assert text.startswith("{"), f"the check page did not finish: {text[:500]}"
    result = json.loads(text)
    assert result["control"] is False, "a missing image counted as loaded: the check cannot fail"
    srcs = [i["src"] for i in result["images"]]
    assert srcs == expected, f"chromium sees other images than the HTML lists:\n{srcs}\n{expected}"
    bad = [i for i in result["images"] if not i["loaded"] or i["width"] <= 0 or i["height"] <= 0]
    assert not bad, f"{len(bad)} figures did not load in chromium: {bad[:5]}"
    assert result["scrollWidth"] <= WIDTH, f"the page is {result['scrollWidth']} px wide at a {WIDTH} px window"
    assert result["title"].startswith(title), f"unexpected title {result['title']!r}"
    print(f"chromium: {len(srcs)} figures loaded and decoded; page {result['scrollWidth']} x {result['height']} px")


def screenshot_check(browser, report, tmp, shot_height=HEIGHT):
    sys.path.insert(0, str(HERE))
    import numpy as np
    import png_util

    png = tmp / f"screenshot-{report.name}.png"
    argv = [browser, *COMMON_FLAGS, f"--user-data-dir={tmp / 'profile-shot'}", "--virtual-time-budget=10000",
            "--run-all-compositor-stages-before-draw", f"--window-size={WIDTH},{shot_height}", f"--screenshot={png}",
            (report / "index.html").as_uri()]
    code, stdout, stderr = run(argv, 120)
    assert code == 0 and png.exists(), f"chromium --screenshot failed (exit code {code}):\n{stdout}\n{stderr[-2000:]}"
    data = png.read_bytes()
    width, height, depth, ctype, _ = png_util.header(data)
    assert (width, height) == (WIDTH, shot_height), f"screenshot is {width} x {height}, expected {WIDTH} x {shot_height}"
    img = png_util.decode(data)[..., :3].astype(np.int64)
    colours = png_util.distinct_colours(img)
    ink = float((img.min(axis=2) < 200).mean())  # text, rules, plot lines, table shading
    figure_pixels = sum(int((((img - np.array(c)) ** 2).sum(axis=2) < 24 ** 2).sum()) for c in GNUPLOT_COLOURS)
    print(f"screenshot: {width} x {height}, {len(data)} bytes, {colours} colours, {100 * ink:.1f} % ink, "
          f"{figure_pixels} pixels in gnuplot's line colours")
    assert colours >= 64, f"only {colours} colours: the screenshot is blank or nearly so"
    assert ink >= 0.02, f"only {100 * ink:.2f} % of the screenshot has ink"
    assert figure_pixels >= 200, "no figure is visible in the screenshot"


def main():
    browser = find_browser()
    if not browser:
        skip("chromium not found (apt-get install chromium, or set TDYN_CHROMIUM)")
    if importlib.util.find_spec("numpy") is None:  # the PNG decoder needs it
        skip("numpy not found (apt-get install python3-numpy)")
    if not shutil.which("gnuplot"):  # without it the report has no SVG figures to render
        skip("gnuplot not found (apt-get install gnuplot-nox)")
    start = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tdyn-render-"))
    ok = False
    try:
        phase = time.monotonic()

        def lap(name):
            nonlocal phase
            print(f"  ({name}: {time.monotonic() - phase:.1f} s)")
            phase = time.monotonic()

        report = make_analysis(tmp)
        lap("analysis")
        images = check_files(report)
        lap("files")
        browser_check(browser, report, tmp, images)
        lap("chromium --dump-dom")
        screenshot_check(browser, report, tmp)
        lap("chromium --screenshot and PNG checks")
        comparison = make_comparison(tmp, report)
        lap("comparison")
        browser_check(browser, comparison, tmp, check_files(comparison), title="tdyn compare")
        screenshot_check(browser, comparison, tmp, shot_height=8000)
        lap("the comparison in chromium")
        ok = True
    finally:
        if ok and not os.environ.get("TDYN_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    print(f"PASS in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
