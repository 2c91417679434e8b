"""torchlogix 0.2.2's compiled Circuit of the packed conv-network bench case (``relaxops.bench.logic.CONV_NET``),
timed per image, for the issue-19 goal (packed inference >= 10x torchlogix's compiled circuit).

torchlogix's ``circuit.py`` needs Python >= 3.12 (nested f-strings, PEP 701), so the harness (Python 3.11 here)
skips its ``torchlogix-circuit-conv`` provider; run this with a Python >= 3.12 environment that has torch and
torchlogix 0.2.2 (relaxops' Python sources are taken from this checkout; its compiled kernels are not needed):

    python3.12 bench/torchlogix_circuit_conv.py [B] [dense]

It builds torchlogix's layers of the same network (leaves, connections and logits copied in, as the harness's
``torchlogix-eval-conv`` provider), traces them to a ``Circuit``, simplifies, compiles with gcc -O1 and 64-bit
packing (as the dense ``torchlogix-circuit`` provider), checks its class scores against our float eval mode and
prints the median time of a call on a Boolean batch of B images (default 1024). Compare with the harness's
``packed-1t-conv`` row of the same machine (both single-threaded, Boolean input, packing included). With ``dense``
it does the same for the dense MNIST "small" network of the ``packed`` cases (``SHAPES["mnist_small"]``: 400
inputs, 6 x 8000 gates; the harness's ``torchlogix-circuit`` provider, which needs Python >= 3.12 in the harness
too; compare with its ``packed-1t`` row).
"""

import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import relaxops  # noqa: E402
from relaxops.bench import logic  # noqa: E402


def main(B: int, net: str) -> None:
    from torchlogix import Circuit

    if net == "dense":
        model, shape = logic._packed_model("mnist_small"), (logic.SHAPES["mnist_small"][0],)
        dense = [logic._torchlogix_dense(m) for m in model if isinstance(m, relaxops.LogicLayer)]
        theirs = torch.nn.Sequential(*dense, logic._torchlogix_layers().GroupSum(model[-1].k))  # tau 1: counts
        scale = 1.0
        case = next(c for c in relaxops.bench.registry.CASES if c.op == "packed" and c.device == "cpu")
        x = logic._packed_batch(type(case)(**{**case.__dict__, "params": dict(shape="mnist_small", batch=B)}))
    else:
        model, shape = logic._conv_net()
        theirs = logic._conv_torchlogix_eval()
        scale = model[-1].tau  # its scores are counts / tau
        case = next(c for c in relaxops.bench.registry.CASES if c.op == "packed_conv" and c.device == "cpu")
        x = logic._conv_batch(type(case)(**{**case.__dict__, "params": dict(batch=B)}))
    with torch.no_grad():
        expected = (model(x.float()) * model[-1].tau).round().to(torch.int64)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # torch.fx's constant folding warns once per folded index tensor
        warnings.simplefilter("ignore", UserWarning)
        circuit = Circuit.from_model(theirs, list(shape))
    t1 = time.perf_counter()
    circuit.simplify()
    t2 = time.perf_counter()
    circuit.compile(opt_level=1, pack_bits=64)
    t3 = time.perf_counter()
    print(
        f"torchlogix Circuit: {len(circuit.gates)} gates after simplify; from_model {t1 - t0:.1f} s, simplify "
        f"{t2 - t1:.1f} s, gcc -O1 {t3 - t2:.1f} s"
    )
    xn = x.numpy()
    out = circuit(xn, use_compiled=True)
    counts = torch.from_numpy(np.rint(np.asarray(out, dtype=np.float64) * scale).astype(np.int64))
    print("class counts equal to our float eval mode:", torch.equal(counts, expected))
    times = []
    for _ in range(15):
        start = time.perf_counter()
        circuit(xn, use_compiled=True)
        times.append(time.perf_counter() - start)
    median = sorted(times)[len(times) // 2]
    print(
        f"B={B}: median {median * 1e3:.3f} ms per call, {median / B * 1e9:.1f} ns per image "
        f"(python {sys.version.split()[0]}, torch {torch.__version__})"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024, sys.argv[2] if len(sys.argv) > 2 else "conv")
