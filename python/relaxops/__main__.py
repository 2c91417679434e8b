"""``python -m relaxops {info,demo,bench,selftest}``."""

from __future__ import annotations

import argparse
import sys


def info() -> None:
    import platform

    import torch

    from . import __version__, _backend, _ext

    print(f"relaxops {__version__} (python {platform.python_version()}, torch {torch.__version__})")
    for name, state in _backend.status().items():
        print(f"  {name:<9} {state}")
    if _ext.has_cpu():
        print(f"  cpu threads: {_ext._C.num_threads()} (OpenMP: {_ext._C.has_openmp()})")
    if _ext._cuda is not None:
        archs, runtime = _ext._cuda.cuda_archs(), _ext._cuda.runtime_version()
        print(f"  cuda module: built for architectures {archs}, CUDA runtime {runtime}")
        for i in range(_ext._cuda.device_count()):
            print(f"  cuda device {i}: {_ext._cuda.device_name(i)}")
    try:
        import triton

        print(f"  triton {triton.__version__}" + (" (interpreter)" if _ext.triton_interpret() else ""))
    except ImportError:
        print("  triton: not installed")
    pairs = [(fam, b) for fam in _backend.GPU_PREFERENCE for b in _backend.GPU_PREFERENCE[fam]]
    gpu = torch.device("cuda") if torch.cuda.is_available() else None
    local = {p: _backend.verified(*p, gpu) for p in pairs} if gpu is not None else {}
    for (fam, b), where in _backend.VERIFIED_GPU.items():
        print(f"  verified by relaxops {fam}/{b}: {where}")
    for (fam, b), where in local.items():
        if where and (fam, b) not in _backend.VERIFIED_GPU:
            print(f"  verified on this device {fam}/{b}: {where}")
    unverified = [f"{fam}/{b}" for fam, b in pairs if (fam, b) not in _backend.VERIFIED_GPU and not local.get((fam, b))]
    if unverified:
        print(f"  unverified GPU kernels (auto skips them; `python -m relaxops selftest` verifies them here): "
              f"{', '.join(unverified)}")
    print(f"  selftest cache: {_backend.cache_path()}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after `bench` belongs to the harness
        from .bench.run import main as bench

        return bench(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m relaxops", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="version, available backends, devices, CUDA architectures")
    demo = sub.add_parser("demo", help="train a small model on built-in data")
    demo.add_argument("family", nargs="?", default="sort", choices=["sort", "topk", "logic", "render"])
    demo.add_argument("--steps", type=int, default=None, help="training steps (default: the demo's own)")
    demo.add_argument("--seed", type=int, default=None, help="random seed (topk, logic and render demos; default 0)")
    demo.add_argument("--method", default=None, choices=["splitter_selection", "bitonic", "odd_even", "neuralsort",
                                                         "softsort"],
                      help="ranking of the top-k loss (topk demo; default splitter_selection)")
    sub.add_parser("bench", help="the benchmark harness (its own options follow: python -m relaxops bench --help)")
    st = sub.add_parser("selftest", help="verify the GPU kernels on this device against the float64 reference")
    st.add_argument("--device", default="cuda", help="cuda (default), or cpu with TRITON_INTERPRET=1 (tests)")
    st.add_argument("--family", action="append", choices=["sortnet", "baselines", "logic", "logic_packed", "render"],
                    help="only these families (repeatable; default all)")
    st.add_argument("--backend", action="append", choices=["cuda", "triton"], help="only these backends")
    st.add_argument("--full", action="store_true", help="also the benchmark sizes (minutes)")
    st.add_argument("--no-record", action="store_true", help="do not write the cache")
    st.add_argument("--child", nargs=3, metavar=("FAMILY", "BACKEND", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
    elif args.command == "selftest":
        from . import selftest

        return selftest.main(args)
    elif args.command == "demo":
        from .demos import run_demo

        options = {k: getattr(args, k) for k in ("seed", "method") if getattr(args, k) is not None}
        allowed = {"sort": (), "topk": ("seed", "method"), "logic": ("seed",), "render": ("seed",)}[args.family]
        extra = [k for k in options if k not in allowed]
        if extra:
            parser.error(f"--{'/--'.join(extra)}: not an option of the {args.family} demo")
        run_demo(args.family, steps=args.steps, **options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
