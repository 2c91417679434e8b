"""Pure-PyTorch references of the fused relaxed algorithms (the test oracles; written for clarity, float64-correct).

Each follows the AlgoVision program it replaces (docs/math/algorithms.md §4) exactly, except that
no branch is skipped for a small probability (AlgoVision's batch-wide ``epsilon`` skip of ``If``): the fused ops
compute the relaxation itself, which the framework computes too when ``epsilon=0``.
"""

from __future__ import annotations

import torch

# --- shortest path (relaxed Bellman-Ford on grids, docs/math/algorithms.md §4.2) --------------------------------------

SP_INF = 1e12  # the padded distance map's "infinity" (AlgoVision's INFTY)
# The 8 predecessor directions (dy, dx): the 3 x 3 neighbourhood without its centre, row-major (AlgoVision's unfold
# order); direction k of cell (y, x) is the cell (y + dy_k, x + dx_k).
SP_OFFSETS = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
SP_T_CONORMS = ("probabilistic", "hamacher", "yager_1")
SP_LOOPS = ("for", "while")


def sp_neighbours(d: torch.Tensor) -> torch.Tensor:
    """``N [B, H, W, 8]``: ``N[b, y, x, k] = d[b, y + 1 + dy_k, x + 1 + dx_k]`` of the padded ``d [B, H + 2,
    W + 2]``."""
    H, W = d.shape[1] - 2, d.shape[2] - 2
    return torch.stack([d[:, 1 + dy : 1 + dy + H, 1 + dx : 1 + dx + W] for dy, dx in SP_OFFSETS], -1)


def sp_bellman_ford(cost: torch.Tensor, beta: float, n_iter: int) -> torch.Tensor:
    """The predecessor distributions ``pi [B, H, W, 8]`` of the last of ``n_iter >= 1`` synchronous relaxed
    Bellman-Ford rounds: ``pi = softmin(beta N)`` over the 8 neighbours of the previous padded distance map ``d``,
    ``d <- pad(sum_k pi N + cost, 1e12)`` with the start ``d[:, 1, 1]`` pinned to 0 after every round."""
    B, H, W = cost.shape
    start = torch.zeros(H + 2, W + 2, dtype=torch.bool, device=cost.device)
    start[1, 1] = True
    d = torch.where(start, 0.0, torch.full((B, H + 2, W + 2), SP_INF, dtype=cost.dtype, device=cost.device))
    pi = None
    for _ in range(n_iter):
        N = sp_neighbours(d)
        pi = torch.softmax(-(N * beta), dim=-1)  # torch.nn.functional.softmin(beta N)
        inner = (pi * N).sum(-1) + cost
        d = torch.where(start, 0.0, torch.nn.functional.pad(inner, (1, 1, 1, 1), value=SP_INF))
    return pi


def sp_move(trace: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """One traceback step: the mass ``trace [B, H, W]`` of each cell moves to its predecessor in direction k with
    weight ``pi[..., k]``; mass leaving the grid is dropped: ``out[y, x] = sum_k trace[y - dy_k, x - dx_k]
    pi[y - dy_k, x - dx_k, k]``."""
    H, W = trace.shape[1:]
    moved = torch.nn.functional.pad(trace.unsqueeze(-1) * pi, (0, 0, 1, 1, 1, 1))
    out = torch.zeros_like(trace)
    for k, (dy, dx) in enumerate(SP_OFFSETS):
        out = out + moved[:, 1 - dy : 1 - dy + H, 1 - dx : 1 - dx + W, k]
    return out


def sp_t_conorm(a: torch.Tensor, b: torch.Tensor, t_conorm: str, p: float | None) -> torch.Tensor:
    """The path accumulation ``a T b``: probabilistic sum, Hamacher with parameter ``p``, or the bounded sum."""
    if t_conorm == "probabilistic":
        return a + b - a * b
    if t_conorm == "hamacher":
        return (a + b + (p - 2) * a * b) / (1 + (p - 1) * a * b)
    if t_conorm == "yager_1":
        return 1 - torch.relu(1 - a - b)
    raise ValueError(f"t_conorm must be one of {list(SP_T_CONORMS)}, got {t_conorm!r}")


def sp_in_graph(path: torch.Tensor, pi: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """``path``, its value unchanged, with edges of weight 0 to ``pi`` and ``cost``: where the path is a constant of
    the costs (a traceback of at most one step never reads ``pi``; the first round's ``pi`` does not read the costs)
    it stays a function of them, whose gradient is the backward of the rounds with a zero adjoint (0, NaN in a row
    with a non-finite cost once a round's ``pi`` reads it), as the kernels'."""
    return torch.where(torch.ones_like(path, dtype=torch.bool), path, pi.sum(-1) + cost)


def shortest_path(
    cost: torch.Tensor,
    beta: float,
    n_iter: int,
    n_trace: int,
    t_conorm: str = "probabilistic",
    hamacher_p: float | None = None,
    loop: str = "for",
    max_iter: int = 1024,
    epsilon: float = 1e-5,
) -> torch.Tensor:
    """AlgoVision's shortest-path example program (docs/math/algorithms.md §4.2) on ``cost [B, H, W]``: ``n_iter``
    relaxed Bellman-Ford rounds, then the traceback from the bottom-right cell with the last round's ``pi``, accumulated
    into the relaxed path ``[B, H, W]`` by the T-conorm: ``n_trace`` steps (``loop="for"``) or AlgoVision's
    ``While(LEq(path[:, 0, 0], 1))`` mixture (continuation probability ``sigmoid(beta (1 - path[:, 0, 0]))``), which
    runs while the largest continuation probability of the batch exceeds ``epsilon`` (rows whose probability is NaN take
    no part) and at most ``max_iter`` steps."""
    B, H, W = cost.shape
    pi = sp_bellman_ford(cost, beta, n_iter)
    trace = torch.zeros_like(cost)
    trace[:, H - 1, W - 1] = 1.0
    path = torch.zeros_like(cost)

    def body(path, trace):
        return sp_t_conorm(path, trace, t_conorm, hamacher_p), sp_move(trace, pi)

    if loop == "for":
        for _ in range(n_trace):
            path, trace = body(path, trace)
        return sp_in_graph(path, pi, cost)
    if loop != "while":
        raise ValueError(f"loop must be one of {list(SP_LOOPS)}, got {loop!r}")

    def continuation(path):  # LEq(path[:, 0, 0], 1) = sigmoid(-(path00 - 1) beta)
        return torch.sigmoid(-(path[:, 0, 0] - 1) * beta)

    P = continuation(path)
    acc = (1 - P)[:, None, None] * path
    i = 0
    while i < max_iter and bool((P > epsilon).any()):  # max(P) > epsilon over the rows whose P is not NaN
        path, trace = body(path, trace)
        P_new = P * continuation(path)
        acc = acc + (P - P_new)[:, None, None] * path
        P = P_new
        i += 1
    return sp_in_graph(acc + P[:, None, None] * path, pi, cost)


# --- edit distance (relaxed Levenshtein, docs/math/algorithms.md §4.4) ------------------------------------------------


def edit_distance(s: torch.Tensor, t: torch.Tensor, beta: float) -> torch.Tensor:
    """The matrix ``D [B, n + 1, m + 1]`` of the relaxed edit distance of ``s [B, n, K]`` and ``t [B, m, K]``.

    AlgoVision's program cell by cell: ``cost = 1 - cos(s_i, t_j)`` (``torch.cosine_similarity``, its eps = 1e-8),
    ``D[i + 1, j + 1] = Min_beta(D[i, j + 1] + 1, D[i + 1, j] + 1, D[i, j] + cost)`` with ``Min_beta(X) =
    sum softmin(beta X) X``, ``D[i, 0] = i``, ``D[0, j] = j``. The distance is ``D[:, n, m]``.
    """
    B, n, m = s.shape[0], s.shape[1], t.shape[1]
    cost = 1 - torch.nn.functional.cosine_similarity(s[:, :, None, :], t[:, None, :, :], dim=-1)  # [B, n, m]
    ramp = torch.arange(max(n, m) + 1, dtype=s.dtype, device=s.device)
    D = [[None] * (m + 1) for _ in range(n + 1)]  # D[i][j]: [B]
    for j in range(m + 1):
        D[0][j] = ramp[j].expand(B)
    for i in range(n):
        D[i + 1][0] = ramp[i + 1].expand(B)
        for j in range(m):
            X = torch.stack([D[i][j + 1] + 1, D[i + 1][j] + 1, D[i][j] + cost[:, i, j]], -1)
            D[i + 1][j + 1] = (torch.softmax(-beta * X, -1) * X).sum(-1)
    D = torch.stack([torch.stack(row, -1) for row in D], -2)
    if n == 0 or m == 0:  # constant: connected to the inputs through the (empty) costs, so that gradients are zeros
        D = D + cost.sum((1, 2))[:, None, None]
    return D


# --- bubble sort (relaxed bubble sort with the While mixture, docs/math/algorithms.md §4.1) ---------------------------


def bubble_sort(
    x: torch.Tensor, beta: float, hard: bool, max_iter: int, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sorted [B, n], swaps [B], any_swap [B])`` of the relaxed bubble sort of ``x [B, n]``.

    AlgoVision's program statement by statement: the While over passes, each pass resetting ``swapped`` and running
    the relaxed swaps of adjacent pairs ``k < m`` (``m = n - 1`` decreasing by one per pass) in an If whose merge
    weight is ``q = sigmoid(beta (a - b))`` (``[q > 1/2]`` if ``hard``); the While's mixture of the states after the
    passes, continuing while some row's continuation probability exceeds ``epsilon`` and fewer than ``max_iter``
    passes ran. No If branch is skipped. Rows with a non-finite value are NaN (their gradient too) and do not take
    part in the batch-wide loop condition.
    """
    B, n = x.shape
    bad = ~x.isfinite().all(-1)
    xs = torch.where(bad[:, None], torch.zeros_like(x), x)
    values = list(xs.unbind(-1))  # values[k]: [B]
    swapped, swaps, any_swap = xs.new_ones(B), xs.new_zeros(B), xs.new_zeros(B)

    def state():
        return [*values, swapped, swaps, any_swap]

    P = swapped  # IsTrue(swapped)
    acc = [(1 - P) * v for v in state()]
    m, it = n - 1, 0
    while bool(((P > epsilon) & ~bad).any()) and it < max_iter:
        swapped = torch.zeros_like(swapped)
        for k in range(m):
            a, b = values[k], values[k + 1]
            p = torch.sigmoid(beta * (a - b))
            q = (p > 0.5).to(p.dtype) if hard else p
            values[k], values[k + 1] = q * b + (1 - q) * a, q * a + (1 - q) * b
            swapped = q * 1.0 + (1 - q) * swapped
            any_swap = q * 1.0 + (1 - q) * any_swap
            swaps = q * (swaps + 1) + (1 - q) * swaps
        m -= 1
        P_new = P * swapped
        acc = [u + (P - P_new) * v for u, v in zip(acc, state())]
        P = P_new
        it += 1
    acc = [u + P * v for u, v in zip(acc, state())]
    # NaN with a NaN gradient in the bad rows, 0 with a 0 gradient elsewhere
    nan = (x * torch.where(bad, float("nan"), 0.0)[:, None]).sum(-1)
    out = torch.stack(acc[:n], -1), acc[n + 1], acc[n + 2]
    return torch.where(bad[:, None], nan[:, None], out[0]), torch.where(bad, nan, out[1]), torch.where(bad, nan, out[2])
