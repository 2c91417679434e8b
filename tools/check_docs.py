"""Builds the documentation site with ``mkdocs build --strict`` and fails on any warning.

mkdocs.yml's ``validation`` turns every broken navigation entry, link between pages, anchor, absolute link and
unrecognized link into a warning, and mkdocstrings every docstring it cannot parse; ``--strict`` makes each one an
error. Usage: ``python tools/check_docs.py [--site-dir DIR]`` (default: a temporary directory, removed after).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(site_dir: str) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the repository's mkdocs.yml into ``site_dir`` (output captured)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # no banner about the theme's future in the log
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--clean",
            "-f",
            os.path.join(ROOT, "mkdocs.yml"),
            "-d",
            site_dir,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site-dir", help="where to build the site (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relaxops-site-") as tmp:
        site = os.path.abspath(args.site_dir or tmp)
        proc = build(site)
        log = proc.stdout + proc.stderr
        sys.stdout.write(log)
        warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
        if proc.returncode != 0 or warnings:
            print(f"check_docs: the documentation build failed ({len(warnings)} warnings or errors)", file=sys.stderr)
            return 1
        pages = sum(f == "index.html" for _, _, files in os.walk(site) for f in files)
        print(f"check_docs: built {pages} pages into {site}, no warnings (links and anchors checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
