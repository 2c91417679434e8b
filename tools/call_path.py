"""The Python frames from a public relaxops call down to its first compiled kernel call.

For each case (a public call, its forward and its backward) ``sys.setprofile`` watches the calls; at the first call
into the compiled module (a builtin function of ``relaxops._C``; for ``--backend triton`` under TRITON_INTERPRET=1,
a kernel launch ``kernel[grid](...)``) the stack of Python frames from the public call down is the path; of the
kernel calls one public call makes, the deepest path counts. The table gives per case the relaxops frames on it
(hops), their distinct files, those that only forward their arguments (a body of one ``return f(...)`` or
``f(...)`` statement passing names on; marked ``fwd`` by ``-v``) and torch's frames on it (the dispatcher of the
registered ops, autograd).

    PYTHONPATH=python python tools/call_path.py [--backend cpu|triton] [--verbose] [CASE ...]
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import sys

import torch

_TORCH_DIR = os.path.dirname(torch.__file__)


@functools.cache
def _functions(filename: str) -> dict[int, ast.AST]:
    """The function definitions of a file by their first line (decorators excluded, as ``co_firstlineno``
    counts them: both lines are keys)."""
    try:
        with open(filename) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out[node.lineno] = node
            for d in getattr(node, "decorator_list", ()):
                out.setdefault(d.lineno, node)
    return out


def only_forwards(code) -> bool:
    """Whether a function's body is one call whose result it returns or drops (its docstring aside)."""
    node = _functions(code.co_filename).get(code.co_firstlineno)
    if node is None:
        return False
    if isinstance(node, ast.Lambda):
        call = node.body
    else:
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
            return False
        call = body[0].value
    if not isinstance(call, ast.Call):
        return False
    # every argument passed on as it came (a name, *name, **name, a constant or an attribute of a name)
    args = [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]
    return all(isinstance(a, (ast.Name, ast.Constant, ast.Attribute)) for a in args)


def _short(filename: str) -> str:
    for root, prefix in ((_TORCH_DIR, "torch"), (os.path.join("python", "relaxops"), "relaxops")):
        i = filename.find(root)
        if i >= 0:
            return prefix + filename[i + len(root) :]
    return os.path.basename(filename)


def _is_kernel_call(event: str, frame, arg, backend: str) -> bool:
    if backend == "triton":
        # kernel[grid](...): JITFunction.__getitem__ (the launcher) called from a relaxops frame
        return (
            event == "call"
            and frame.f_code.co_name == "__getitem__"
            and "triton" in frame.f_code.co_filename
            and frame.f_back is not None
            and "relaxops" in frame.f_back.f_code.co_filename
        )
    return (
        event == "c_call"
        and getattr(arg, "__module__", None) == "relaxops._C"
        and getattr(arg, "__name__", "") not in _QUERIES
        and not arg.__name__.endswith(("_numel", "_bytes"))
    )


# functions of relaxops._C that answer a question (thread count, buffer sizes) rather than run a kernel
_QUERIES = ("num_threads", "set_num_threads")


def trace(fn, entry_code, backend: str):
    """The longest stack (outermost first) below ``entry_code``'s frame at a kernel call of ``fn()``: the kernels
    of one public call each have a path; the deepest one counts."""
    found = []

    def profile(frame, event, arg):
        if not _is_kernel_call(event, frame, arg, backend):
            return
        start = frame.f_back if event == "call" else frame
        stack = []
        f = start
        while f is not None and f.f_code is not entry_code:
            stack.append(f.f_code)
            f = f.f_back
        found.append(stack[::-1])

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return max(found, key=lambda st: (sum(_ours(c) for c in st), len(st))) if found else None


def _ours(code) -> bool:
    return _short(code.co_filename).startswith("relaxops")


# --- cases: (forward thunk, loss) --------------------------------------------------------------------------------


def _cases(backend: str) -> dict:
    import relaxops

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g, requires_grad=True)

    def sort():
        return relaxops.sort(x, return_matrix=True, backend=backend)[1]

    def rank():
        return relaxops.rank(x, backend=backend)

    def topk():
        return relaxops.topk(x, 4, backend=backend)

    layer = relaxops.LogicLayer(16, 32, backend=backend)
    xl = torch.rand(8, 16, generator=g, requires_grad=True)

    def logic():
        return layer(xl)

    vertices, faces = relaxops.render.icosphere(1)
    fv = relaxops.render.face_vertices(vertices.unsqueeze(0) * 0.5, faces.unsqueeze(0))
    fv[..., 2] += 3.0  # in front of the camera
    fv.requires_grad_(True)
    tex = torch.rand(1, fv.shape[1], 1, 3, generator=g)

    def render():
        return relaxops.rasterize(fv, tex, image_size=16, backend=backend)

    cases = {"sort": sort, "rank": rank, "topk": topk, "logic": logic, "render": render}
    if backend == "triton":
        del cases["render"]  # no Triton rasterizer
    return cases


def _backward(out):
    out.sum().backward()


def measure(fn, backend: str):
    """(forward path, backward path) of the case ``fn``: the frames below its own."""
    fn()  # warm caches (networks, inverse indices, imports)
    fwd = trace(fn, fn.__code__, backend)
    out = fn()
    bwd = trace(lambda: _backward(out), _backward.__code__, backend)
    return fwd, bwd


def _row(op: str, path) -> tuple:
    """op, relaxops frames (hops), their distinct files, those that only forward, torch frames, the frames."""
    path = path or []
    frames = [(c.co_name, _short(c.co_filename), _ours(c) and only_forwards(c), _ours(c)) for c in path]
    ours = [f for f in frames if f[3]]
    return op, len(ours), len({f[1] for f in ours}), sum(f[2] for f in ours), len(frames) - len(ours), frames


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cpu", choices=("cpu", "triton"))
    p.add_argument("--verbose", "-v", action="store_true", help="list the frames of every path")
    p.add_argument("cases", nargs="*")
    args = p.parse_args(argv)
    if args.backend == "triton":
        os.environ["TRITON_INTERPRET"] = "1"
    cases = _cases(args.backend)
    rows = []
    for name in args.cases or list(cases):
        fwd, bwd = measure(cases[name], args.backend)
        rows += [_row(f"{name} fwd", fwd), _row(f"{name} bwd", bwd)]
    print(f"backend {args.backend}: relaxops frames (hops) from the public call to its deepest kernel call")
    print(f"{'op':<12} {'hops':>4} {'files':>5} {'fwd-only':>8} {'torch':>5}")
    for op, hops, files, forwarding, torch_frames, _ in rows:
        print(f"{op:<12} {hops:>4} {files:>5} {forwarding:>8} {torch_frames:>5}")
    if args.verbose:
        for op, *_, frames in rows:
            print(f"\n{op}:")
            for fn, file, fw, _ in frames:
                print(f"  {'fwd ' if fw else '    '}{fn:<28} {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
