"""Tolerances and comparison helpers shared by the test suites.

Kernels are compared with a float64 reference. The bounds, per compute dtype:
* float64: the kernels reorder a few additions (e.g. ``v + a (u - v)`` instead of ``a u + (1 - a) v``), so
  they agree with the reference to a few ulps times the network depth: rtol 1e-9, atol 1e-10.
* float32: same reasoning with eps = 1.2e-7 and depth <= ~100 layers: rtol 1e-4, atol 1e-5; where the problem
  itself is ill-conditioned in float32 (e.g. ART's derivative ~ 80 s near ties amplifies the rounding of the
  gaps), ``assert_as_accurate_as_reference`` also accepts an error of at most twice that of the reference run
  in float32 (the rule for half precision below).
* float16/bfloat16: computed in float32 internally; the error against the float64 reference must be at most
  twice that of the reference run in the same low precision (``assert_low_precision_close``).
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from relaxops import _backend
from torch.utils._python_dispatch import TorchDispatchMode

TOLERANCES = {
    torch.float64: dict(rtol=1e-9, atol=1e-10),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None, scale=1.0, msg=""):
    """Compare with the tolerance of ``dtype`` (default: actual's); ``scale`` grows atol for large magnitudes."""
    tol = TOLERANCES[dtype or actual.dtype]
    torch.testing.assert_close(
        actual.to(expected.dtype),
        expected,
        rtol=tol["rtol"],
        atol=tol["atol"] * scale,
        equal_nan=True,
        msg=(lambda m: f"{msg}\n{m}") if msg else None,
    )


def assert_low_precision_close(actual: torch.Tensor, low_ref: torch.Tensor, exact: torch.Tensor, slack=1e-3):
    """Error of ``actual`` vs the float64 ``exact`` at most twice that of ``low_ref`` (the reference in low precision).

    ``slack`` is an absolute floor (half precision's unit roundoff is ~1e-3), so that a reference that happens
    to be exact on a tiny case does not demand exactness.
    """
    err = (actual.double() - exact).abs().max().item()
    ref_err = (low_ref.double() - exact).abs().max().item()
    assert err <= 2 * ref_err + slack, f"low-precision error {err:.3g} > 2 x reference error {ref_err:.3g} + {slack}"


def assert_as_accurate_as_reference(actual, low_ref, exact, dtype, scale=1.0, msg=""):
    """``actual`` within the ``dtype`` tolerance of the float64 ``exact``, or at most twice as far from it as
    ``low_ref`` (the reference computed in ``dtype``) plus that tolerance."""
    tol = TOLERANCES[dtype]
    err = (actual.double() - exact).abs().max().item() if exact.numel() else 0.0
    ref_err = (low_ref.double() - exact).abs().max().item() if exact.numel() else 0.0
    allowed = tol["atol"] * scale + tol["rtol"] * (exact.abs().max().item() if exact.numel() else 0.0)
    assert err <= allowed or err <= 2 * ref_err + allowed, (
        f"{msg}: error {err:.3g} vs float64 exceeds {allowed:.3g} and 2 x the {dtype} reference's {ref_err:.3g}"
    )


def outputs_and_grads(fn, *args, seed=7, skip_nan=False, **kwargs):
    """The outputs of ``fn(*args, **kwargs)`` (detached; ``None`` kept) followed by the gradients, with respect to
    each floating-point tensor in ``args``, of the linear functional sum_i <out_i, G_i>.

    G_i is standard normal, drawn in float64 in output order from one generator seeded with ``seed`` and cast to
    out_i's device and dtype; seed None makes every G_i one. ``skip_nan`` sums with nansum (rows a fuzz case made
    non-finite). A gradient the functional does not reach (no comparator, an unused weight) is zero. Called with the
    same arguments for a backend and for ``backend="reference"``, the two lists compare entry by entry."""
    args = [a.detach().requires_grad_(True) if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    leaves = [a for a in args if torch.is_tensor(a) and a.requires_grad]
    outs = fn(*args, **kwargs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    loss = 0.0
    for o in outs:
        if o is None:
            continue
        w = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device, o.dtype) if gen else 1.0
        loss = loss + ((o * w).nansum() if skip_nan else (o * w).sum())
    if torch.is_tensor(loss) and loss.requires_grad:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)
    else:
        grads = [torch.zeros_like(a) for a in leaves]
    return [None if o is None else o.detach() for o in outs] + list(grads)


class _RecordOps(TorchDispatchMode):
    """Records each call of a ``relaxops::`` op below autograd: (op, args, kwargs), tensors copied as they were;
    a tensor keeps ``requires_grad`` in the calls of a forward, not in those of a backward pass."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "relaxops":
            grad = torch._C._current_graph_task_id() == -1  # no backward pass is running

            def keep(a):
                return a.detach().clone().requires_grad_(grad and a.requires_grad) if torch.is_tensor(a) else a

            self.calls.append((func, tuple(map(keep, args)), {k: keep(v) for k, v in kwargs.items()}))
        return func(*args, **kwargs)


# Host reads of tensor values: the aten ops that copy a value to the host (``.item()``, ``bool(t)``, ``int(t)``) or
# whose output size depends on the values (``nonzero``, boolean masks), and the Python conversions (``tolist``,
# ``numpy``, ``cpu``) that bypass the dispatcher; and host values sent to a tensor's device (``torch.tensor(values,
# device=d)``, ``t.to(d)`` without ``non_blocking``: from pageable memory, a copy that synchronises the stream). On
# a GPU each waits for the device (docs/gpu.md, "Host synchronisations").
_READ_OPS = ("_local_scalar_dense", "is_nonzero", "item", "equal", "nonzero", "masked_select", "_unique2")
_READ_METHODS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")


class _RecordReads(TorchDispatchMode):
    """Records each aten op of ``_READ_OPS`` (and indexing by a boolean mask) reached outside a ``relaxops::`` op's
    own kernel (the dispatcher hides the calls inside one); ``host_reads`` patches the Python conversions too."""

    def __init__(self, reads):
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        masks = name in ("index", "index_put", "index_put_") and any(
            torch.is_tensor(i) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()) if i is not None
        )
        if name in _READ_OPS or masks:
            self.reads.append(f"aten.{name} at {_caller()}")
        return func(*args, **(kwargs or {}))


def _caller() -> str:
    """The innermost frame in relaxops' own code."""
    import traceback

    for frame in reversed(traceback.extract_stack()):
        if "/relaxops/" in frame.filename and "/tests/" not in frame.filename:
            return f"{frame.filename.split('/relaxops/')[-1]}:{frame.lineno}"
    return "?"


class host_reads:
    """``with host_reads() as reads:`` lists each host read of tensor values in the block (``"what at
    file:line"``), with the value checks of ``relaxops._checks`` in their device mode on CPU tensors too
    (``DEVICE_CHECKS_ON_CPU``): a CPU run proves that the code path of CUDA tensors reads nothing on the host."""

    def __enter__(self):
        from relaxops import _checks

        self.reads, self._saved = [], {m: getattr(torch.Tensor, m) for m in _READ_METHODS}
        self._device_checks = getattr(_checks, "DEVICE_CHECKS_ON_CPU", False)  # (absent before the switch existed)
        _checks.DEVICE_CHECKS_ON_CPU = True
        reads = self.reads

        def recording(name, method):
            def read(t, *args, **kwargs):
                reads.append(f"Tensor.{name} at {_caller()}")
                return method(t, *args, **kwargs)

            return read

        for m, method in self._saved.items():
            setattr(torch.Tensor, m, recording(m, method))
        self._tensor = torch.tensor

        def tensor(*args, **kwargs):
            where = _caller()
            if kwargs.get("device") is not None and where != "?":  # relaxops' own, not the caller's inputs
                reads.append(f"torch.tensor(device=...) at {where}")
            return self._tensor(*args, **kwargs)

        torch.tensor = tensor
        self._to = torch.Tensor.to

        def to(t, *args, **kwargs):  # a copy to another device (on a GPU: host to device unless already there)
            where = _caller()
            device = any(isinstance(a, (torch.device, str)) for a in (*args, *kwargs.values()))
            if device and not kwargs.get("non_blocking") and not where.startswith(("?", "_checks.py")):
                reads.append(f"Tensor.to(device) at {where}")
            return self._to(t, *args, **kwargs)

        torch.Tensor.to = to
        self._mode = _RecordReads(reads)
        self._mode.__enter__()
        return reads

    def __exit__(self, *exc):
        from relaxops import _checks

        self._mode.__exit__(*exc)
        for m, method in self._saved.items():
            setattr(torch.Tensor, m, method)
        torch.tensor = self._tensor
        torch.Tensor.to = self._to
        _checks.DEVICE_CHECKS_ON_CPU = self._device_checks
        return False


def opcheck_calls(fn, *args, backward=True, **kwargs) -> list[str]:
    """``torch.library.opcheck`` (every default test, test_aot_dispatch_dynamic included) on each relaxops op that
    ``fn(*args, **kwargs)`` and the backward of its outputs call (``backward=False``: the call alone, under
    ``torch.no_grad``), with the arguments of those calls, so that the cases of a family's reference checks feed its
    op checks. The call is made as under ``torch.compile`` (``torch.compiler.is_compiling()`` true): in eager mode
    the public functions call the ops' implementations directly, past the dispatcher (docs/design.md). Returns the
    names of the ops checked, in call order."""
    # the flag that is_compiling() returns (replacing the function itself would leave dynamo's rules for it, built
    # lazily, pointing at the replacement: later torch.compile calls then graph-break on is_compiling)
    with mock.patch.object(torch.compiler, "_is_compiling_flag", True), _RecordOps() as rec:
        if backward:
            outputs_and_grads(fn, *args, **kwargs)
        else:
            with torch.no_grad():
                fn(*args, **kwargs)
    for op, op_args, op_kwargs in rec.calls:
        torch.library.opcheck(op, op_args, op_kwargs)
    return [op.name() for op, _, _ in rec.calls]


def gapped(shape, dtype=torch.float64, gap=0.05, device="cpu"):
    """Random rows whose values differ by at least `gap` (no near-ties: finite differences stay valid)."""
    n = shape[-1]
    base = torch.randperm(n).to(dtype) * gap * 2 + torch.rand(n, dtype=dtype) * gap
    rows = torch.stack([base[torch.randperm(n)] for _ in range(math.prod(shape[:-1]))]) if len(shape) > 1 else base
    return (rows.reshape(shape) - n * gap).to(device)


def run_isolated(code: str, timeout: float = 300):
    """Run ``code`` in a fresh interpreter, so that a crash (segfault, abort) kills only that process; the
    environment (PYTHONPATH, TRITON_INTERPRET, ...) is inherited. Returns the ``subprocess.CompletedProcess``
    after asserting that the process was not killed by a signal."""
    import os
    import subprocess
    import sys
    import textwrap

    env = dict(os.environ)
    if not torch.cuda.is_available():
        env.setdefault("TRITON_INTERPRET", "1")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def assert_raises_isolated(code: str, exc: str, match: str = "", timeout: float = 300):
    """``code``, run in a fresh interpreter, raises the exception class named ``exc`` (its message containing
    ``match``) instead of crashing or returning."""
    proc = run_isolated(code, timeout)
    tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert proc.returncode != 0, f"expected {exc}, but the code ran to the end\nstdout:\n{proc.stdout[-2000:]}"
    assert tail.split(":")[0].split(".")[-1] == exc and match in tail, f"expected {exc}({match!r}), got:\n{tail}"


def defined_names(module) -> set[str]:
    """Public names an original package's module defines itself: its functions and classes (and aliases of them),
    its constants (no ``__module__``, or UPPER_CASE), not the modules and names it imports."""
    import types

    return {
        name
        for name, v in vars(module).items()
        if not name.startswith("_")
        and not isinstance(v, types.ModuleType)
        and (getattr(v, "__module__", module.__name__) == module.__name__ or name.isupper())
    }


def assert_mirrors(compat_module, names) -> None:
    """Every name is provided by ``compat_module`` (listed in its ``__all__``) or named in its docstring (as
    ``name`` in double backticks) as left out, and every name of its ``__all__`` is there."""
    left = [n for n in sorted(names) if n not in compat_module.__all__ and f"``{n}``" not in compat_module.__doc__]
    assert not left, f"{compat_module.__name__}: neither provided nor documented as left out: {left}"
    assert all(hasattr(compat_module, n) for n in compat_module.__all__)


def available_backends(device: str) -> list[str]:
    dev = torch.device(device)
    return [b for b in ("reference", "cpu", "cuda", "triton") if _backend.unavailable_reason(b, dev) is None]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# (backend, device) pairs that can run here; GPU pairs carry the `gpu` marker.
BACKEND_DEVICE = [
    pytest.param(b, d, id=f"{b}-{d}", marks=[pytest.mark.gpu] if d == "cuda" else [])
    for d in DEVICES
    for b in available_backends(d)
]
KERNEL_BACKEND_DEVICE = [p for p in BACKEND_DEVICE if p.values[0] != "reference"]


def relaxation_cases(backend_device, sizes):
    """``(param, relaxation, size)`` for every relaxation of the sorting networks on every size (an int n or a tuple
    starting with n), except that interpreted Triton runs n > 16 with two relaxations only: the relaxation is one
    n-independent function of the kernels, and those two still run every network, launch configuration and exchange
    path (with and without tl.gather) of n = 33, 100 in the interpreter."""
    from relaxops import RELAXATIONS

    for p in backend_device:
        backend, device = p.values
        for relaxation in RELAXATIONS:
            for size in sizes:
                n = size[0] if isinstance(size, tuple) else size
                if backend == "triton" and device == "cpu" and n > 16 and relaxation not in ("cauchy", "logistic_phi"):
                    continue
                yield p, relaxation, size


def assert_no_device_sync(run) -> None:
    """``run()`` (a warm forward and backward on CUDA tensors) synchronises neither through torch
    (``set_sync_debug_mode("error")``: torch's own syncs, such as ``.item()`` or a blocking copy in a launcher; not
    the CUDA calls of the extension) nor device-wide (a ``cudaFree`` or ``cudaDeviceSynchronize`` would wait for a
    kernel sleeping on another stream). A synchronisation of the call's own stream is not seen."""
    side, done = torch.cuda.Stream(), torch.cuda.Event()
    with torch.cuda.stream(side):
        torch.cuda._sleep(4_000_000_000)  # about 2 s
        done.record(side)
    torch.cuda.set_sync_debug_mode("error")
    try:
        run()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert not done.query(), "the call waited for another stream's kernel: a device-wide synchronisation"
