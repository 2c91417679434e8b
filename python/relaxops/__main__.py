"""``python -m relaxops {info,demo,reproduce,bench,selftest}``: the command line of relaxops."""

from __future__ import annotations

import argparse
import sys
import textwrap


def info() -> None:
    import platform

    import torch

    from . import __version__, _backend, _ext

    print(f"relaxops {__version__} (python {platform.python_version()}, torch {torch.__version__})")
    build = _ext.build_info()
    if build["variant"] is None:
        print("  variant:  source tree without build info (built in place; README: Install)")
    else:
        what = (
            "C++ CPU kernels only; the CUDA kernels are in the cu12 wheels"
            if build["variant"] == "cpu"
            else (f"with the CUDA module ({build['cuda_archs']})")
        )
        print(f"  variant:  {build['variant']} ({what}; distribution version {build['version'] or 'not installed'})")
    for name, state in _backend.status().items():
        print(f"  {name:<9} {state}")
    if _ext.has_cpu():
        where = (
            "PyTorch's OpenMP threads while they start on time, else relaxops' own pool"
            if _ext._C.torch_threads_found()
            else "relaxops' own pool"
        )
        print(f"  cpu threads: {_ext._C.num_threads()} (torch.get_num_threads(); {where})")
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
    ours = [f"{fam}/{b}" for fam, b in _backend.VERIFIED_GPU]
    if not torch.cuda.is_available():
        print(
            f"  no CUDA GPU here: CPU tensors run the cpu backend. On a GPU, backend='auto' runs the GPU kernels "
            f"verified by relaxops ({', '.join(ours) or 'none yet'}: {len(ours)} of {len(pairs)} family/backend "
            f"pairs) and the PyTorch reference for the others, until `python -m relaxops selftest` verifies them "
            f"on that GPU (docs/gpu.md)"
        )
        return
    gpu = torch.device("cuda")
    local = {p: _backend.verified(*p, gpu) for p in pairs}
    for (fam, b), where in _backend.VERIFIED_GPU.items():
        print(f"  verified by relaxops {fam}/{b}: {where}")
    for (fam, b), where in local.items():
        if where and (fam, b) not in _backend.VERIFIED_GPU:
            print(f"  verified on this device {fam}/{b}: {where}")
    unverified = [f"{fam}/{b}" for fam, b in pairs if (fam, b) not in _backend.VERIFIED_GPU and not local.get((fam, b))]
    if unverified:
        print(
            f"  unverified GPU kernels (auto skips them; `python -m relaxops selftest` verifies them here): "
            f"{', '.join(unverified)}"
        )
    print(f"  selftest cache: {_backend.cache_path()}")


HELP = {
    "info": (
        "what is installed and usable here: versions, backends, threads, CUDA, verified GPU kernels",
        """\
Prints, without running any kernel:
  - the relaxops, Python and torch versions;
  - each backend (reference, cpu, cuda, triton): available, or why not
    (e.g. the CUDA module is not built, no GPU is visible);
  - the CPU threads of the C++ kernels (torch's thread count);
  - the CUDA module's architectures and runtime, and the visible CUDA devices;
  - the Triton version (and whether TRITON_INTERPRET=1 runs it on the CPU);
  - the GPU kernels verified by relaxops or by a selftest on this device, the
    unverified ones (backend="auto" does not pick them), and the path of the
    selftest cache.""",
    ),
    "demo": (
        "train a small model on built-in data (sort, topk, logic, render, rank, algorithms, perturbed, "
        "newton, convlogic)",
        None,
    ),  # epilog: demo_epilog()
    "reproduce": (
        "run one of the papers' experiments (real data from --data DIR, or bundled digits at small scale)",
        None,
    ),  # epilog: reproduce_epilog()
    "bench": ("the benchmark harness; everything after `bench` is its own (python -m relaxops bench --help)", None),
    "selftest": (
        "verify this machine's GPU kernels against the float64 reference, for backend='auto'",
        """\
Runs every GPU kernel (CUDA and Triton) of each family against the float64
PyTorch reference, outputs and gradients on small, odd and large shapes, each
family in a child process. What passed is recorded for this GPU, driver and
relaxops version in the selftest cache (`python -m relaxops info` shows its
path; RELAXOPS_CACHE_DIR moves it); backend="auto" then uses those kernels.
Exit status: 0 all passed, 1 a kernel failed, 2 no CUDA device.""",
    ),
}


def demo_epilog() -> str:
    from .demos import DEMOS

    lines = [
        "demos (durations: one run each with the default steps on a 2-core CPU with",
        "little else running; several times longer when other work shares the cores.",
        "The data ships with scikit-learn, nothing is downloaded; sort, topk and logic",
        'need `pip install "relaxops[demo]"`):',
    ]
    for name, d in DEMOS.items():
        lines.append(f"  {name}")
        for fact in (d.shows, f"Duration: {d.duration}.", f"Writes: {d.writes}."):
            lines += textwrap.wrap(fact, 78, initial_indent=" " * 4, subsequent_indent=" " * 4, break_on_hyphens=False)
    lines.append("\nexample: python -m relaxops demo topk --method softsort --seed 1")
    return "\n".join(lines)


def reproduce_epilog() -> str:
    from .experiments import EXPERIMENTS

    lines = [
        "experiments (docs/experiments.md has the paper's numbers beside ours; results go to",
        "OUT/NAME-SCALE.json after every finished run, and a plot to OUT/NAME-SCALE.png):",
    ]
    for name, e in EXPERIMENTS.items():
        lines.append(f"  {name}")
        lines += textwrap.wrap(f"{e.summary} ({e.reproduces})", 78, initial_indent=" " * 4, subsequent_indent=" " * 4)
    lines += [
        "scales: smoke (seconds, for tests), small (bundled real digits, at most about 10",
        "minutes on 2 cores), paper (the paper's configuration; needs --data DIR for the",
        "real data sets and, at the paper's step counts, a GPU or days).",
        "\nexample: python -m relaxops reproduce sorting --scale small --seeds 2",
    ]
    return "\n".join(lines)


def _positive(kind, noun: str):
    """An argparse type: a ``kind`` (int, float) greater than 0."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be a positive {noun}, got {text!r}")
        return value

    return parse


positive_int = _positive(int, "integer")
positive_float = _positive(float, "number")


def device(text: str) -> str:
    import torch

    try:
        kind = torch.device(text).type
    except RuntimeError:
        kind = None
    if kind not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"must be cuda, cuda:N or cpu, got {text!r}")
    return text


def make_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="python -m relaxops",
        formatter_class=raw,
        description="relaxops: differentiable sorting and top-k networks, NeuralSort/SoftSort, logic\n"
        "gate networks and the GenDR rasterizer for PyTorch.",
        epilog="`python -m relaxops COMMAND --help` explains each command. A first run:\n"
        "  python -m relaxops info\n  python -m relaxops demo sort",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name):
        summary, details = HELP[name]
        return sub.add_parser(
            name,
            help=summary,
            description=textwrap.fill(summary[0].upper() + summary[1:] + ".", 78),
            epilog=details,
            formatter_class=raw,
        )

    add("info")
    demo = add("demo")
    demo.epilog = demo_epilog()
    from .demos import DEMOS
    from .demos.algorithms import TASKS

    demo.add_argument(
        "name",
        nargs="?",
        default="sort",
        choices=list(DEMOS),
        metavar="DEMO",
        help=f"one of {', '.join(DEMOS)} (default: sort)",
    )
    demo.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="training steps (default: the demo's own; render and depth: for the shape and the pose fit each)",
    )
    demo.add_argument(
        "--seed",
        type=int,
        default=None,
        help=(
            "random seed (topk, logic, render, depth, rank, algorithms, perturbed, newton and convlogic demos; "
            "default 0)"
        ),
    )
    demo.add_argument(
        "--method",
        default=None,
        choices=["splitter_selection", "bitonic", "odd_even", "neuralsort", "softsort"],
        help="ranking of the top-k loss (topk demo; default splitter_selection)",
    )
    demo.add_argument(
        "--task", default=None, choices=TASKS, help="the task of the algorithms demo (default: a short levenshtein run)"
    )
    demo.add_argument(
        "--compare",
        default=None,
        choices=["torchlogix"],
        help="convlogic demo: also train the same network in torchlogix 0.2.2's layers",
    )
    from .logic.parametrize import PARAMETRIZATIONS, SAMPLINGS

    demo.add_argument(
        "--parametrization",
        default=None,
        choices=list(PARAMETRIZATIONS),
        help="logic demo: the gates' parametrization (default softmax; docs/math/logic.md)",
    )
    demo.add_argument(
        "--sampling",
        default=None,
        choices=list(SAMPLINGS),
        help="logic demo: the training sampling mode (default soft)",
    )
    rep = add("reproduce")
    rep.epilog = reproduce_epilog()
    from .experiments import EXPERIMENTS, SCALES

    rep.add_argument("name", choices=list(EXPERIMENTS), metavar="NAME", help=f"one of {', '.join(EXPERIMENTS)}")
    rep.add_argument("--scale", choices=SCALES, default="small", help="smoke, small (default) or paper")
    rep.add_argument(
        "--data", default=None, metavar="DIR", help="directory of the real data sets' files (docs/experiments.md)"
    )
    rep.add_argument("--seeds", type=positive_int, default=None, help="number of seeds (default: the scale's)")
    rep.add_argument(
        "--out", default="relaxops-results", metavar="DIR", help="results directory (default: %(default)s)"
    )
    rep.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    rep.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace an entry of the scale's configuration (repeatable; lists comma-separated), e.g. "
        "--set methods=cauchy,logistic --set steps=200; the results file records the configuration",
    )
    add("bench")
    from ._backend import GPU_PREFERENCE
    from .selftest import FAMILIES

    st = add("selftest")
    st.add_argument(
        "--device", type=device, default="cuda", help="cuda (default), cuda:N, or cpu with TRITON_INTERPRET=1 (tests)"
    )
    st.add_argument(
        "--family",
        action="append",
        choices=list(FAMILIES),
        metavar="FAMILY",
        help=f"only these families (repeatable; default all): {', '.join(FAMILIES)}",
    )
    st.add_argument(
        "--backend",
        action="append",
        choices=sorted({b for bs in GPU_PREFERENCE.values() for b in bs}),
        help="only these backends",
    )
    st.add_argument("--full", action="store_true", help="also the benchmark sizes (minutes)")
    st.add_argument("--no-record", action="store_true", help="do not write the cache")
    st.add_argument("--jobs", type=positive_int, default=1, help="children at a time (default 1)")
    st.add_argument(
        "--shards",
        type=positive_int,
        default=1,
        help="split the cases of each pair between this many children (default 1)",
    )
    st.add_argument("--timeout", type=positive_float, default=1800, help="seconds per child (default 1800)")
    st.add_argument(
        "--deadline",
        type=positive_float,
        default=None,
        help="start no child, and stop every child, this many seconds after the start",
    )
    st.add_argument("--child", nargs=3, metavar=("FAMILY", "BACKEND", "DEVICE"), help=argparse.SUPPRESS)
    st.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after `bench` belongs to the harness
        from .bench.run import main as bench

        return bench(argv[1:])
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
    elif args.command == "selftest":
        from . import selftest

        return selftest.main(args)
    elif args.command == "reproduce":
        from .experiments import reproduce

        bad = [item for item in args.set if "=" not in item]
        if bad:
            parser.error(f"--set: expected KEY=VALUE, got {bad[0]!r}")
        overrides = dict(item.split("=", 1) for item in args.set)
        try:
            reproduce(args.name, args.scale, args.data, args.seeds, args.out, not args.no_plot, overrides)
        except ValueError as e:
            if not str(e).startswith("overrides:"):
                raise
            parser.error(str(e))
    elif args.command == "demo":
        from .demos import run_demo

        options = {
            k: getattr(args, k)
            for k in ("seed", "method", "task", "compare", "parametrization", "sampling")
            if getattr(args, k) is not None
        }
        allowed = {
            "sort": (),
            "topk": ("seed", "method"),
            "logic": ("seed", "parametrization", "sampling"),
            "render": ("seed",),
            "depth": ("seed",),
            "rank": ("seed",),
            "algorithms": ("seed", "task"),
            "perturbed": ("seed",),
            "newton": ("seed",),
            "convlogic": ("seed", "compare"),
        }[args.name]
        extra = [k for k in options if k not in allowed]
        if extra:
            parser.error(f"--{'/--'.join(extra)}: not an option of the {args.name} demo")
        run_demo(args.name, steps=args.steps, **options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
