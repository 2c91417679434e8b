"""The documentation site: ``mkdocs build --strict`` into a temporary directory (tools/check_docs.py: navigation,
links and anchors checked), then pages rendered in headless Chromium, whose DOM must hold the page's real content:
the home page's headings, a math page's title and TeX, the API page's entry and signature of ``relaxops.sort``.

Skipped where mkdocs (``pip install ".[docs]"``) or Chromium is not installed; CI installs both (.ci/run)."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = next((shutil.which(c) for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)

pytestmark = [
    pytest.mark.docs,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("mkdocs", "material", "mkdocstrings_handlers")),
        reason='mkdocs, mkdocs-material or mkdocstrings-python is not installed (pip install ".[docs]")',
    ),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("site"))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "check_docs.py"), "--site-dir", out],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"the documentation build failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    return out


class _Text(HTMLParser):
    """The text of a DOM, and the text of each heading (h1-h3) by tag; scripts and styles left out."""

    def __init__(self):
        super().__init__()
        self.parts, self.headings, self._skip, self._heading = [], [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in ("h1", "h2", "h3"):
            self._heading = [tag, ""]

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        elif self._heading is not None and tag == self._heading[0]:
            self.headings.append((tag, self._heading[1].strip().rstrip("¶").strip()))
            self._heading = None

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)
            if self._heading is not None:
                self._heading[1] += data


def render(site: str, page: str) -> tuple[str, _Text]:
    """The DOM of ``page`` (a path under the site) after Chromium ran its scripts, offline (every host name
    unresolvable: MathJax's CDN is not needed), and its parsed text."""
    path = os.path.join(site, page)
    assert os.path.isfile(path), f"{page} was not built"
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--dump-dom",
            "file://" + path,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "</html>" in proc.stdout, f"chromium failed on {page}:\n{proc.stderr[-2000:]}"
    text = _Text()
    text.feed(proc.stdout)
    return proc.stdout, text


def source_title(md: str) -> str:
    """The first ``# `` heading of a Markdown file of docs/."""
    with open(os.path.join(ROOT, "docs", md)) as f:
        return next(line[2:].strip() for line in f if line.startswith("# "))


def test_home_page(site):
    dom, text = render(site, "index.html")
    headings = [h for _, h in text.headings]
    assert ("h1", "relaxops") in text.headings
    assert "Install and first run" in headings and "Which differentiable sort should I use?" in headings
    body = re.sub(r"\s+", " ", "".join(text.parts))
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in body
    assert "relaxops.soft_rank" in body  # the table of which op to use
    assert 'href="api/sortnet/"' in dom  # the family table links the API pages


def test_math_page(site):
    dom, text = render(site, "math/sortnet/index.html")
    assert ("h1", source_title("math/sortnet.md").replace("`", "")) in text.headings
    with open(os.path.join(ROOT, "docs", "math", "sortnet.md")) as f:
        if "$" in f.read():  # TeX kept for MathJax by arithmatex (raw, readable without it)
            assert 'class="arithmatex"' in dom


def test_api_page_has_the_signature_of_sort(site):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    try:
        import relaxops
    finally:
        sys.path.pop(0)
    dom, text = render(site, "api/sortnet/index.html")
    assert ("h1", "relaxops.sortnet") in text.headings
    assert 'id="relaxops.sortnet.sort"' in dom
    # the rendered entry of relaxops.sort: from its heading to the next entry's
    entry = dom[dom.index('id="relaxops.sortnet.sort"') : dom.index('id="relaxops.sortnet.rank"')]
    words = _Text()
    words.feed(entry)
    signature = re.sub(r"\s+", " ", "".join(words.parts))
    assert "sort( x: Tensor," in signature, signature[:500]
    for name, p in inspect.signature(relaxops.sort).parameters.items():
        assert f"{name}:" in signature, f"parameter {name} of relaxops.sort is not on the API page"
        if p.default is not inspect.Parameter.empty:
            assert f"= {p.default!r}".replace("'", '"') in signature, f"default of {name} not on the API page"
    assert "Differentiable sort of the last dimension" in signature  # the docstring's summary
