"""Every page of the documentation site, rendered in a headless browser: does it load, and does each of its
pictures draw?

The site is built as ``make docs`` builds it (``mkdocs build --strict``, into a temporary folder), served
over real HTTP on localhost, and each page opened in headless Chromium through Selenium (the browser and
its driver: Debian's ``chromium`` and ``chromium-driver``; Selenium: the ``docs`` extra). A page passes
when the browser finishes loading it, every ``<img>`` on it has loaded with a width (an SVG that fails to
parse has none), and the browser's console logged no error. The pages that must show a picture
(:data:`MUST_SHOW`) fail without one.

    .venv/bin/python benchmarks/docs_render.py [--site DIR] [--out benchmarks/results]

Exit 0 when every page passes, 1 when one does not, 2 when the browser or Selenium is missing. Writes
``docs_render.md`` (a row per page) to ``--out``. Not run in CI (the browser is a few hundred MB to
install there); run it after changing a page or a picture.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
# The pages issue 55 asks a picture of: the index, accuracy, parallel, serving, sharing and simulator pages.
MUST_SHOW = ("index.html", "accuracy/index.html", "parallel/index.html", "serving/index.html",
             "sharing/index.html", "simulator/index.html")
# Each <img>: its source, whether it finished loading and the width it drew at (0: it did not draw).
IMAGES_JS = ("return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]);")


def _first(paths) -> str | None:
    return next((p for p in paths if Path(p).exists()), None)


def build(site: Path) -> None:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    if r.returncode != 0:
        raise SystemExit(f"error: mkdocs build failed: {(r.stderr or r.stdout).strip().splitlines()[-1]}")


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def pages(site: Path) -> list[str]:
    """Every page of the site (its index.html files), the 404 page left out."""
    return sorted(str(p.relative_to(site)) for p in site.rglob("index.html")
                  if not str(p.relative_to(site)).startswith(("404", "assets")))


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _first(CHROMIUM)
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(_first(CHROMEDRIVER)), options=opts)


def check(driver, base: str, page: str) -> dict:
    driver.get(base + page)
    state = driver.execute_script("return document.readyState;")
    images = driver.execute_script(IMAGES_JS)
    broken = [src for src, done, width in images if not done or not width]
    errors = [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    title = driver.title
    ok = state == "complete" and not broken and not errors and (bool(images) or page not in MUST_SHOW)
    return {"page": page, "title": title, "images": len(images), "broken": broken, "errors": errors,
            "needs_picture": page in MUST_SHOW, "ok": ok}


def render(rows: list[dict], version: str) -> str:
    lines = ["# The docs in a headless browser", "",
             f"`.venv/bin/python benchmarks/docs_render.py`: every page of the site built by `mkdocs build --strict`, "
             f"served over HTTP and opened in headless {version} (Selenium). A page passes when it loads, each "
             "`<img>` draws (loaded, with a width) and the console logs no error; the pages marked * must show a "
             "picture.", "",
             f"{sum(r['ok'] for r in rows)} of {len(rows)} pages pass, "
             f"{sum(r['images'] - len(r['broken']) for r in rows)} of {sum(r['images'] for r in rows)} pictures drawn.",
             "",
             "| page | pictures | not drawn | console errors | passes |", "| --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['page']}{' *' if r['needs_picture'] else ''} | {r['images']} | {len(r['broken'])} | "
                     f"{len(r['errors'])} | {'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="a site already built (default: build one into a temporary folder)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    a = ap.parse_args(argv)
    if not _first(CHROMIUM) or not _first(CHROMEDRIVER):
        print("error: no Chromium and chromedriver found (Debian: apt-get install chromium chromium-driver)",
              file=sys.stderr)
        return 2
    if importlib.util.find_spec("selenium") is None:
        print("error: Selenium is not installed (pip install -e '.[docs]')", file=sys.stderr)
        return 2
    from rich.progress import track

    tmp = None
    if a.site is None:
        tmp = Path(tempfile.mkdtemp(prefix="gpucast-site-"))
        build(tmp)
    site = a.site or tmp
    server, base = serve(site)
    driver = browser()
    try:
        version = f"Chromium {driver.capabilities.get('browserVersion', '?')}"
        rows = [check(driver, base, p) for p in track(pages(site), description="rendering the docs", transient=True)]
    finally:
        driver.quit()
        server.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    for r in rows:
        for what in r["broken"]:
            print(f"{r['page']}: picture not drawn: {what}", file=sys.stderr)
        for e in r["errors"]:
            print(f"{r['page']}: console error: {e}", file=sys.stderr)
        if r["needs_picture"] and not r["images"]:
            print(f"{r['page']}: no picture", file=sys.stderr)
    text = render(rows, version)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "docs_render.md").write_text(text, encoding="utf-8")
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
