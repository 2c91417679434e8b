"""The durations README states, against those that CI measured in the same run (.ci/run):

    python tools/check_durations.py tests=SECONDS heavy=SECONDS

README states each as "about N minute(s)" in a fixed sentence (PATTERNS). Every step is printed beside its figure;
a step that took more than twice its figure plus a minute fails (exit 1): README then understates it and must be
re-measured. A CI machine differs from the one that measured the figures, hence the slack. (CI does not run the
README's install as a user does, since it builds the CUDA module too, nor the benchmark harness's default run:
README's install figure names docs/build.md, where it was measured, and tests/test_readme.py checks the
benchmark figure against the results file that README names.)
"""

from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATTERNS = {
    "tests": r"the default run takes about (\d+) minutes?",
    "heavy": r"the `heavy` tier (\d+) more",
}


def stated_minutes(readme: str) -> dict[str, int]:
    """README's figure for each step, in minutes."""
    text = " ".join(readme.split())  # sentences may wrap
    out = {}
    for step, pattern in PATTERNS.items():
        m = re.search(pattern, text)
        if m is None:
            raise SystemExit(f"check_durations: README has no sentence matching {pattern!r} (the {step} figure)")
        out[step] = int(m.group(1))
    return out


def main(argv: list[str]) -> int:
    with open(os.path.join(ROOT, "README.md")) as f:
        stated = stated_minutes(f.read())
    failed = False
    for arg in argv:
        step, _, seconds = arg.partition("=")
        if step not in stated:
            raise SystemExit(f"check_durations: unknown step {step!r} (known: {', '.join(stated)})")
        took, figure = float(seconds), stated[step]
        ok = took <= 2 * figure * 60 + 60
        failed |= not ok
        print(f"{step}: {took / 60:.1f} min, README says about {figure} min{'' if ok else ': README understates it'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
