"""Download what a GPU machine without network needs for `bench/gpu_session.sh` into `.whl/` (git-ignored;
the device call carries it): wheels of the pure-Python originals we compare against, and the sdists of the
originals that build CUDA kernels there (difflogic, gendr, torchsort) or ship only as sdists (difftopk).

    python bench/fetch_gpu_deps.py [--dest .whl] [--python-version 3.12] [--relaxops PYTHON] [--arch 90]

Wheels come from `pip download` for the device's platform; sdists straight from the package index that pip is
configured with (its simple API), because `pip download` of an sdist builds its metadata, which these CUDA
packages cannot do on a machine without a CUDA torch. `--relaxops PYTHON` also builds relaxops' wheel for that
interpreter (the GPU machine's version: 3.12) with the CUDA module for `--arch` into .whl/relaxops/ (nvcc needed
here, no GPU; the modules are torch-free, so the wheel serves any torch there); gpu_session.sh takes its modules.
"""

from __future__ import annotations

import argparse
import html.parser
import os
import subprocess
import sys
import urllib.parse
import urllib.request

WHEELS = ["diffsort==0.2.0"]
SDISTS = {"difftopk": "0.2.0", "difflogic": "0.1.0", "gendr": None, "torchsort": "0.1.10"}  # None: newest
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def index_url() -> str:
    """The simple-API index pip is configured with (PIP_INDEX_URL / pip config), else pip's default."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True
        )
        url = out.stdout.strip() if out.returncode == 0 else ""
    if not url:
        from pip._internal.models.index import PyPI

        url = PyPI.simple_url
    return url.rstrip("/") + "/"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]


def fetch_sdist(name: str, version: str | None, dest: str) -> str:
    page_url = urllib.parse.urljoin(index_url(), f"{name}/")
    with urllib.request.urlopen(page_url, timeout=60) as r:
        parser = _Links()
        parser.feed(r.read().decode())
    sdists = [urllib.parse.urljoin(page_url, h) for h in parser.links if h.split("#")[0].endswith(".tar.gz")]
    if version is not None:
        sdists = [u for u in sdists if f"-{version}.tar.gz" in u.split("#")[0]]
    if not sdists:
        raise SystemExit(f"no sdist of {name} {version or ''} on {page_url}")
    url = sdists[-1]  # the index lists files oldest first
    path = os.path.join(dest, os.path.basename(urllib.parse.urlparse(url).path))
    urllib.request.urlretrieve(url.split("#")[0], path)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", default=".whl")
    p.add_argument("--python-version", default="3.12")
    p.add_argument(
        "--relaxops",
        metavar="PYTHON",
        help="also build relaxops' wheel for this interpreter (it needs pybind11, scikit-build-core, cmake and ninja)",
    )
    p.add_argument("--arch", default="90", help="CUDA architectures of that wheel (default 90)")
    a = p.parse_args()
    if a.relaxops:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        wheels = os.path.join(a.dest, "relaxops")
        for old in os.listdir(wheels) if os.path.isdir(wheels) else []:
            os.remove(os.path.join(wheels, old))
        env = {**os.environ, "RELAXOPS_CUDA": "ON", "CMAKE_ARGS": f"-DCMAKE_CUDA_ARCHITECTURES={a.arch}"}
        subprocess.run(
            [
                a.relaxops,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-build-isolation",
                "--no-deps",
                "-C",
                "build-dir=build/gpu-session-wheel",
                "-w",
                wheels,
                root,
            ],
            check=True,
            env=env,
        )
    os.makedirs(os.path.join(a.dest, "sdist"), exist_ok=True)
    platforms = [x for plat in PLATFORMS for x in ("--platform", plat)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            a.python_version,
            "--implementation",
            "cp",
            *platforms,
            "-d",
            a.dest,
            *WHEELS,
        ],
        check=True,
    )
    for name, version in SDISTS.items():
        print(fetch_sdist(name, version, os.path.join(a.dest, "sdist")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
