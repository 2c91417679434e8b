"""The relaxed algorithms of docs/math/algorithms.md §4 written as framework programs.

Each builder takes the namespace whose classes build the program (``relaxops.algorithms.framework`` by default;
``algovision`` builds the same program with AlgoVision 0.1.2, which is how tests and the benchmark compare the
two). The fused ops (``bubble_sort``, ``edit_distance``, ``shortest_path``) compute the same relaxations in one
kernel each; these programs are their executable specification and the framework's benchmark.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import framework

INFTY = 1e12  # the distance of the padding ring and of cells not reached yet (shortest path)

# the 8 neighbours (dy, dx) of a cell, row-major without the centre
OFFSETS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))


def bubble_sort_program(beta: float = 5.0, M=framework, **hyper):
    """Relaxed bubble sort (docs/math/algorithms.md §4.1): ``values [B, n] -> (sorted values, swaps, any_swap)``;
    ``swaps`` is the expected number of swaps, ``any_swap`` the probability that at least one swap happened."""
    return M.Algorithm(
        M.Input("values"),
        M.Var("a", torch.tensor(0.0)),
        M.Var("b", torch.tensor(0.0)),
        M.Var("swapped", torch.tensor(1.0)),
        M.Var("swaps", torch.tensor(0.0)),
        M.Var("any_swap", torch.tensor(0.0)),
        M.VarInt("m", lambda values: values.shape[1] - 1),
        M.While(
            M.IsTrue("swapped"),
            M.Let("swapped", 0),
            M.For(
                "k",
                "m",
                M.Let("a", "values", ["k"]),
                M.Let("b", "values", [lambda k: k + 1]),
                M.If(
                    M.GT("a", "b"),
                    if_true=[
                        M.Let("values", [lambda k: k + 1], "a"),
                        M.Let("values", ["k"], "b"),
                        M.Let("swapped", 1.0),
                        M.Let("any_swap", 1.0),
                        M.Let("swaps", lambda swaps: swaps + 1.0),
                    ],
                ),
            ),
            M.LetInt("m", lambda m: m - 1),
        ),
        M.Output("values"),
        M.Output("swaps"),
        M.Output("any_swap"),
        beta=beta,
        **hyper,
    )


def edit_distance_program(beta: float = 5.0, M=framework, **hyper):
    """Relaxed Levenshtein distance (docs/math/algorithms.md §4.4):
    ``(s [B, n, K], t [B, m, K]) -> D [B, n + 1, m + 1]`` (the distance is ``D[:, n, m]``); the substitution cost is
    ``1 - cos(s_i, t_j)``, the minimum ``Min(beta)``."""
    soft_min = M.Min(beta=beta)
    return M.Algorithm(
        M.Input("s"),
        M.Input("t"),
        M.Var("D", lambda s, t: torch.zeros(s.shape[1] + 1, t.shape[1] + 1, dtype=s.dtype)),
        M.Var("cost", lambda s: torch.zeros((), dtype=s.dtype)),
        M.VarInt("n", lambda s: s.shape[1]),
        M.VarInt("m", lambda t: t.shape[1]),
        M.For("i", "n", M.Let("D", [lambda i: i + 1, 0], lambda i: float(i + 1))),
        M.For("j", "m", M.Let("D", [0, lambda j: j + 1], lambda j: float(j + 1))),
        M.For(
            "i",
            "n",
            M.For(
                "j",
                "m",
                M.If(
                    M.CosineSimilarity(lambda s, i: s[:, i], lambda t, j: t[:, j]),
                    if_true=M.Let("cost", 0),
                    if_false=M.Let("cost", 1),
                ),
                M.Let(
                    "D",
                    [lambda i: i + 1, lambda j: j + 1],
                    lambda D, i, j, cost: soft_min(D[:, i, j + 1] + 1, D[:, i + 1, j] + 1, D[:, i, j] + cost),
                ),
            ),
        ),
        M.Output("D"),
        beta=beta,
        **hyper,
    )


def _relax_distances(d, cost, beta):
    """One synchronous round: every cell's relaxed minimum over its 8 padded neighbours plus its own cost.
    Returns the padded distances [B, H + 2, W + 2] and the predecessor distributions [B, H, W, 8]."""
    B, H, W = cost.shape
    nb = torch.stack([d[:, 1 + dy : 1 + dy + H, 1 + dx : 1 + dx + W] for dy, dx in OFFSETS], -1)
    pi = torch.softmax(-beta * nb, -1)
    return F.pad((pi * nb).sum(-1) + cost, (1, 1, 1, 1), value=INFTY), pi


def _trace_step(trace, pi):
    """Moves each cell's mass to its predecessors: ``trace'[y, x] = sum_k trace[y - dy_k, x - dx_k] pi[.., k]``
    (mass leaving the grid is dropped)."""
    H, W = trace.shape[1:]
    moved = F.pad(trace.unsqueeze(-1) * pi, (0, 0, 1, 1, 1, 1))
    return sum(moved[:, 1 - dy : 1 - dy + H, 1 - dx : 1 - dx + W, k] for k, (dy, dx) in enumerate(OFFSETS))


T_CONORMS = {
    "probabilistic": lambda a, b, p: a + b - a * b,
    "hamacher": lambda a, b, p: (a + b + (p - 2) * a * b) / (1 + (p - 1) * a * b),
    "yager_1": lambda a, b, p: 1 - torch.relu(1 - a - b),
}


def shortest_path_program(
    beta: float = 10.0,
    n_iter: int = 25,
    t_conorm: str = "probabilistic",
    hamacher_p: float | None = None,
    loop: str = "for",
    M=framework,
    **hyper,
):
    """Relaxed Bellman-Ford on a grid with 8-neighbourhood and node weights, then the traceback of the relaxed
    path from the bottom-right to the top-left cell (docs/math/algorithms.md §4.2):
    ``cost [B, H, W] -> path [B, H, W]``. ``loop="for"`` traces ``n_iter`` steps, ``"while"`` while
    ``path[:, 0, 0] <= 1`` (relaxed)."""
    if t_conorm not in T_CONORMS:
        raise ValueError(f"t_conorm must be one of {sorted(T_CONORMS)}, got {t_conorm!r}")
    conorm = T_CONORMS[t_conorm]
    body = (
        M.Let("path", lambda path, trace: conorm(path, trace, hamacher_p)),
        M.Let("trace", lambda trace, pi: _trace_step(trace, pi)),
    )
    if loop == "for":
        traceback = M.For("step", n_iter, *body)
    elif loop == "while":
        traceback = M.While(M.LEq(lambda path: path[:, 0, 0], 1.0), *body)
    else:
        raise ValueError(f"loop must be 'for' or 'while', got {loop!r}")
    return M.Algorithm(
        M.Input("cost"),
        M.Var("d", lambda cost: torch.full((cost.shape[1] + 2, cost.shape[2] + 2), INFTY, dtype=cost.dtype)),
        M.Var("pi", lambda cost: torch.zeros(cost.shape[1], cost.shape[2], 8, dtype=cost.dtype)),
        M.Var("trace", lambda cost: torch.zeros(cost.shape[1], cost.shape[2], dtype=cost.dtype)),
        M.Var("path", lambda cost: torch.zeros(cost.shape[1], cost.shape[2], dtype=cost.dtype)),
        M.Let("d", [1, 1], 0.0),
        M.Let("trace", [-1, -1], 1.0),
        M.For(
            "it", n_iter, M.Let(["d", "pi"], lambda d, cost: _relax_distances(d, cost, beta)), M.Let("d", [1, 1], 0.0)
        ),
        traceback,
        M.Output("path"),
        beta=beta,
        **hyper,
    )
