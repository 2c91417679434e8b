"""The benchmark harness of a checkout: ``python bench/run.py [options]`` is ``python -m relaxops bench [options]``
with the results under ``bench/results/<device>/`` (the harness ships with the package: ``relaxops/bench``)."""

import os
import sys

from relaxops.bench.run import main

if __name__ == "__main__":
    sys.exit(
        main(
            results_root=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"), prog="python bench/run.py"
        )
    )
