"""The documentation site in a real browser: built strictly, served on 127.0.0.1, every page
loaded in headless Chromium (Debian's ``chromium``); it fails on a request the server cannot
answer (a missing image, stylesheet or script), a console message, a link to a page or file
the site does not have, an anchor the target page lacks, or an interactive plot left undrawn.
Behind ``slow`` (a minute: one browser start per page); skipped where Chromium is not
installed (``apt-get install chromium``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [  # no network beyond loopback, nothing of the user's profile
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]
CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]


class Links(HTMLParser):
    """The ids, and the href/src of every element, of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)
            if key in ("href", "src") and value and tag != "link":
                self.refs.append(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [str(ROOT / ".venv/bin/mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(out)]
    if not Path(cmd[0]).exists():
        cmd[0] = shutil.which("mkdocs") or pytest.skip("needs mkdocs (the docs extra)")
    subprocess.run(cmd, cwd=ROOT, check=True, env=env)
    return out


def _local(site: Path, url: str) -> Path | None:
    """The file of the site that ``url`` (on the test server) names, or None."""
    path = site / unquote(urlsplit(url).path).lstrip("/")
    if path.is_dir():
        path = path / "index.html"
    return path if path.is_file() else None


def check_site(site: Path, profile: Path) -> tuple[list[str], list[str]]:
    """Every page of ``site`` loaded in Chromium from a server on 127.0.0.1: the pages' URLs
    and what is wrong (failed requests, console messages, links to nothing, missing anchors)."""
    failed: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def log_request(self, code: object = "-", size: object = "-") -> None:
            if int(str(code)) >= 400:
                failed.append((self.path, int(str(code))))

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    pages = sorted(p for p in site.rglob("index.html") if "assets" not in p.parts)
    problems, doms = [], {}
    try:
        for page in pages:
            folder = page.relative_to(site).parent.as_posix()
            url = base + ("" if folder == "." else folder + "/")
            proc = subprocess.run(
                [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                capture_output=True,
                text=True,
                timeout=120,
            )
            problems += [f"{url}: console: {m}" for m in CONSOLE.findall(proc.stderr)]
            parser = Links()
            parser.feed(proc.stdout)
            doms[url] = parser
            if "</html>" not in proc.stdout:
                problems.append(f"{url}: did not load ({proc.stderr[-300:]})")
            plots = proc.stdout.count('class="plotly-graph-div')
            if plots and proc.stdout.count('class="main-svg"') < plots:
                problems.append(f"{url}: an interactive plot was not drawn")
    finally:
        server.shutdown()
        server.server_close()
    problems += [f"{path}: HTTP {code}" for path, code in failed]
    ids = {url: parser.ids for url, parser in doms.items()}
    for url, parser in doms.items():
        for ref in parser.refs:
            target = urljoin(url, ref)
            if not target.startswith(base) or ref.startswith(("mailto:", "javascript:")):
                continue  # the theme's links out (GitHub, fonts): not this site's
            if _local(site, target) is None:
                problems.append(f"{url}: link to {ref}: not a file of the site")
                continue
            fragment = urlsplit(target).fragment
            page_url = target.split("#")[0]
            if fragment and page_url in ids and unquote(fragment) not in ids[page_url]:
                problems.append(f"{url}: link to {ref}: no such anchor")
    return list(doms), problems


def test_every_page_loads_in_a_browser_without_a_missing_file_or_console_message(site, tmp_path):
    pages, problems = check_site(site, tmp_path / "profile")
    assert len(pages) >= 25 and any(p.endswith("/results/demo/report/") for p in pages)
    demo = (site / "results" / "demo" / "report" / "index.html").read_text()
    assert "plotly-graph-div" in demo  # drawn, or a problem below says it was not
    assert not problems, "\n".join(problems[:30])


def test_the_check_finds_a_missing_image_a_console_error_a_dead_link_and_anchor(tmp_path):
    site = tmp_path / "site"
    (site / "other").mkdir(parents=True)
    (site / "index.html").write_text(
        '<html><head><link rel="icon" href="data:,"></head><body><img src="missing.png">'
        '<script>console.error("boom")</script>'
        '<a href="other/">ok</a><a href="nowhere/">dead</a><a href="other/#gone">anchor</a>'
        "</body></html>"
    )
    (site / "other" / "index.html").write_text(
        '<html><head><link rel="icon" href="data:,"></head><body id="here">'
        '<div class="plotly-graph-div" id="p"></div></body></html>'  # Plotly never loaded
    )
    pages, problems = check_site(site, tmp_path / "profile")
    assert len(pages) == 2
    found = "\n".join(problems)
    assert "/missing.png: HTTP 404" in found and 'console: "boom"' in found
    assert "link to nowhere/: not a file of the site" in found
    assert "link to other/#gone: no such anchor" in found
    assert "link to missing.png: not a file of the site" in found  # the image, as a link too
    assert "/other/: an interactive plot was not drawn" in found
    assert len(problems) == 6 and "link to other/:" not in found, problems
