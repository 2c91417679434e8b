"""Autograd ops of the sorting-network family, registered with ``torch.library``.

Three differentiable ops, each a separate forward and backward kernel (see ``csrc/sortnet/sortnet.h``):

* ``relaxops::sortnet_values_fwd(x) -> (sorted, d, alpha)``; backward ``sortnet_values_bwd`` takes the
  gradients of ``sorted`` and ``alpha`` (``d`` is a saved gap, not differentiable);
* ``relaxops::sortnet_matrix_fwd(alpha, col_begin) -> X``, rows ``col_begin..`` of ``P^T`` (``col_begin = 0``:
  ``X = P^T``); backward ``sortnet_matrix_bwd`` returns the gradient of ``alpha``;
* ``relaxops::sortnet_rank_fwd(x) -> rank``, the soft ranks ``rank = P^T (1..n)`` (the values pass, then the
  positions through the layers in reverse); backward ``sortnet_rank_bwd(x, grad_rank)`` recomputes the values
  pass and returns the gradient of ``x`` (O(C) work per row both ways, no matrix; only ``x`` is saved). Eager
  calls on the CPU (``Rank``) save the values pass's ``d`` and ``alpha`` instead (``2 C`` per row, in reused
  buffers) and the backward skips it: 1.2x to 1.5x faster fwd+bwd.

Top-k (``topk``) composes them on the reversed network: the last ``k`` columns of ``P^T`` are rows
``n-k..`` of ``P^T`` for the reversed comparator order (every ``P_l`` is symmetric), O(C k) per row.

Autograd composes them: the permutation-matrix path reaches ``x`` through ``alpha``. Saved for backward:
``d`` and ``alpha`` (``2 C`` values per row, ``C = O(L n)``); no per-layer matrices.

``network`` is a network kind or a key from ``networks.register_network``; ``backend`` is a concrete
backend (``cpu``, ``cuda``, ``triton``), chosen by ``relaxops._backend.resolve``.

Padded rows: every op takes ``lengths`` (int64 ``[B]``) and the values and matrix ops ``ks`` (int64 ``[B]``, a top-k
per row): each row then runs the network for its length (and k), ``networks.row_networks``; the kernels read the
rows' ``RowSpec`` table (``csrc/sortnet/sortnet.h``; the triton kernels the same table, ``triton.py``).

The ops are public (``torch.ops.relaxops.*``): each checks its arguments (dtypes, device, shapes against the
network, contiguity, ranges) before a kernel runs; the fake kernels run the same checks. A network is built for
a concrete ``n``, so a compiled graph specializes on ``n`` (a guard; the batch dimension stays dynamic): the
comparator count ``C`` is not a closed-form function of a symbolic ``n``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .. import _backend, _checks, _ext
from .networks import PREFIX_NETWORKS, Network, RowNetworks, resolve_network, reversed_key, row_networks
from .relaxations import RELAXATIONS

_FLOATS = (torch.float32, torch.float64)
_MAX_N = 2**31 - 1  # wires are int32 in the network tables


class _CpuKernels:
    """Launchers of the C++ kernels in ``relaxops._C`` (host pointers). ``net`` is a ``Network`` (full rows) or
    the ``RowNetworks`` of rows of their own lengths."""

    @staticmethod
    def _net(net, device):
        """The network group and the row-network group of the kernels' arguments (``make_rows`` in sortnet.h)."""
        if isinstance(net, RowNetworks):
            table = net.table(device)  # kept by `net` (cached), alive for the call
            L = max(g.num_layers for g in net.nets)  # (only n and L are read; L: the CUDA backward's plan)
            return (net.n, L, 0, 0, 0, 0, (len(net.nets), _ext.ptr(table), _ext.ptr(net.spec), net.C))
        t = net.tables(device)
        C = net.num_comparators
        return (net.n, net.num_layers, C, _ext.ptr(t.layer_ptr), _ext.ptr(t.cmin), _ext.ptr(t.cmax), (0, 0, 0, C))

    @classmethod
    def values_forward(cls, x, net, relaxation, steepness, art_lambda, sorted_, d, alpha):
        _ext._C.sortnet_values_forward(
            _ext.dtype_code(x),
            *cls._net(net, x.device),
            relaxation,
            steepness,
            art_lambda,
            x.shape[0],
            _ext.ptr(x),
            _ext.ptr(sorted_),
            _ext.ptr(d),
            _ext.ptr(alpha),
        )

    @classmethod
    def values_backward(cls, grad_sorted, grad_alpha, d, alpha, net, relaxation, steepness, art_lambda, grad_x):
        _ext._C.sortnet_values_backward(
            _ext.dtype_code(d),
            *cls._net(net, d.device),
            relaxation,
            steepness,
            art_lambda,
            grad_x.shape[0],
            _ext.ptr(grad_sorted),
            _ext.ptr(grad_alpha),
            _ext.ptr(d),
            _ext.ptr(alpha),
            _ext.ptr(grad_x),
        )

    @classmethod
    def matrix_forward(cls, alpha, net, col_begin, X, topk_layout=False, rows=None):
        """``topk_layout``: ``alpha`` of the network ``net`` reverses, ``X [B, n, m]``, or ``[B, m]`` with ``rows``
        (int64 ``[B]``: row ``rows[b]`` of each; see ``_TopK``)."""
        _ext._C.sortnet_matrix_forward(
            _ext.dtype_code(alpha),
            *cls._net(net, alpha.device),
            alpha.shape[0],
            col_begin,
            _ext.ptr(alpha),
            _ext.ptr(X),
            topk_layout,
            _ext.ptr(rows),
        )

    @classmethod
    def matrix_backward(cls, alpha, grad_X, net, col_begin, grad_alpha, topk_layout=False, rows=None):
        _ext._C.sortnet_matrix_backward(
            _ext.dtype_code(alpha),
            *cls._net(net, alpha.device),
            alpha.shape[0],
            col_begin,
            _ext.ptr(alpha),
            _ext.ptr(grad_X),
            _ext.ptr(grad_alpha),
            topk_layout,
            _ext.ptr(rows),
        )

    @classmethod
    def rank_forward(cls, x, net, relaxation, steepness, art_lambda, rank, saved=None):
        _ext._C.sortnet_rank_forward(
            _ext.dtype_code(x),
            *cls._net(net, x.device),
            relaxation,
            steepness,
            art_lambda,
            x.shape[0],
            _ext.ptr(x),
            _ext.ptr(rank),
            _ext.ptr(saved),
        )

    @classmethod
    def rank_backward(cls, x, grad_rank, net, relaxation, steepness, art_lambda, grad_x, saved=None):
        _ext._C.sortnet_rank_backward(
            _ext.dtype_code(x),
            *cls._net(net, x.device),
            relaxation,
            steepness,
            art_lambda,
            x.shape[0],
            _ext.ptr(x),
            _ext.ptr(grad_rank),
            _ext.ptr(saved),
            _ext.ptr(grad_x),
        )

    @staticmethod
    def rank_saved(x, net):
        """The buffer in which the forward saves d and alpha for the backward ([2 C] per row, the kernel's
        layout): from the reused buffers from 1 MiB (below, torch's allocator is cheaper than their bookkeeping,
        ~8 us); None where there is nothing to save or it would take more than 1 GiB or a quarter of the
        available memory (the backward then recomputes them: O(n) memory per row)."""
        G = len(net.nets) if isinstance(net, RowNetworks) else 0
        numel = _ext._C.sortnet_rank_saved_numel(_stride(net), x.shape[0], G)
        nbytes = numel * x.element_size()
        if (
            numel == 0
            or nbytes > _RANK_SAVED_MAX
            or (nbytes > _checks._ALWAYS_FITS and nbytes > _checks._available_bytes(x.device) // 4)
        ):
            return None
        return _RANK_SAVED.take(numel, x.dtype) if nbytes >= 1 << 20 else torch.empty(numel, dtype=x.dtype)


def _stride(net) -> int:
    """The row stride of ``d`` and ``alpha``: the comparator count of a network, or of the rows' networks."""
    return net.C if isinstance(net, RowNetworks) else net.num_comparators


# What the CPU rank forwards save for their backward (at most 1 GiB a call); at most 1 GiB of free buffers stays
# for the next calls.
_RANK_SAVED_MAX = 2**30
_RANK_SAVED = _ext.ReusedBuffers(_RANK_SAVED_MAX)


class _CudaKernels(_CpuKernels):
    """Launchers of the CUDA kernels in ``relaxops._cuda`` (device pointers, current stream)."""

    @classmethod
    def values_forward(cls, x, net, relaxation, steepness, art_lambda, sorted_, d, alpha):
        _ext._cuda.sortnet_values_forward(
            _ext.dtype_code(x),
            *cls._net(net, x.device),
            relaxation,
            steepness,
            art_lambda,
            x.shape[0],
            _ext.ptr(x),
            _ext.ptr(sorted_),
            _ext.ptr(d),
            _ext.ptr(alpha),
            _ext.stream(x.device),
        )

    @classmethod
    def values_backward(cls, grad_sorted, grad_alpha, d, alpha, net, relaxation, steepness, art_lambda, grad_x):
        _ext._cuda.sortnet_values_backward(
            _ext.dtype_code(d),
            *cls._net(net, d.device),
            relaxation,
            steepness,
            art_lambda,
            grad_x.shape[0],
            _ext.ptr(grad_sorted),
            _ext.ptr(grad_alpha),
            _ext.ptr(d),
            _ext.ptr(alpha),
            _ext.ptr(grad_x),
            _ext.stream(d.device),
        )

    @classmethod
    def matrix_forward(cls, alpha, net, col_begin, X):
        _ext._cuda.sortnet_matrix_forward(
            _ext.dtype_code(alpha),
            *cls._net(net, alpha.device),
            X.shape[0],
            col_begin,
            _ext.ptr(alpha),
            _ext.ptr(X),
            _ext.stream(alpha.device),
        )

    @classmethod
    def matrix_backward(cls, alpha, grad_X, net, col_begin, grad_alpha):
        # Checkpoints, segment differences and per-tile-group partial sums live in a workspace taken from
        # torch's allocator on the current stream (its size depends on n, L, C, B and col_begin only).
        dtype, B = _ext.dtype_code(alpha), alpha.shape[0]
        nets = net.nets if isinstance(net, RowNetworks) else (net,)  # sized for the largest network of the rows
        nbytes = _ext._cuda.sortnet_matrix_backward_workspace_bytes(
            dtype, net.n, max(g.num_layers for g in nets), _stride(net), B, col_begin
        )
        _checks.memory_fits(
            nbytes, alpha.device, "relaxops::sortnet_matrix_bwd: the CUDA workspace", "use a smaller batch"
        )
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=alpha.device)
        _ext._cuda.sortnet_matrix_backward(
            dtype,
            *cls._net(net, alpha.device),
            B,
            col_begin,
            _ext.ptr(alpha),
            _ext.ptr(grad_X),
            _ext.ptr(grad_alpha),
            _ext.ptr(workspace),
            nbytes,
            _ext.stream(alpha.device),
        )

    @classmethod
    def rank_forward(cls, x, net, relaxation, steepness, art_lambda, rank):
        # alpha of every comparator: [B, C] of x's dtype, from torch's allocator on the current stream
        workspace = cls._workspace(x, _stride(net), "relaxops::sortnet_rank_fwd")
        _ext._cuda.sortnet_rank_forward(
            _ext.dtype_code(x),
            *cls._net(net, x.device),
            relaxation,
            steepness,
            art_lambda,
            x.shape[0],
            _ext.ptr(x),
            _ext.ptr(rank),
            _ext.ptr(workspace),
            workspace.numel(),
            _ext.stream(x.device),
        )

    @classmethod
    def rank_backward(cls, x, grad_rank, net, relaxation, steepness, art_lambda, grad_x):
        # d, alpha, u_i - u_j of every comparator and, where shared memory is short, a row: [B, 3 C + n]
        workspace = cls._workspace(x, 3 * _stride(net) + net.n, "relaxops::sortnet_rank_bwd")
        _ext._cuda.sortnet_rank_backward(
            _ext.dtype_code(x),
            *cls._net(net, x.device),
            relaxation,
            steepness,
            art_lambda,
            x.shape[0],
            _ext.ptr(x),
            _ext.ptr(grad_rank),
            _ext.ptr(grad_x),
            _ext.ptr(workspace),
            workspace.numel(),
            _ext.stream(x.device),
        )

    @staticmethod
    def _workspace(x, per_row, op):
        _checks.output_fits((x.shape[0], per_row), x.dtype, x.device, f"{op}: the CUDA workspace")
        return torch.empty(x.shape[0], per_row, dtype=x.dtype, device=x.device)


_kernels = _backend.family_launcher(_CpuKernels, _CudaKernels, f"{__package__}.triton")


# --- argument checks (plain `if`s: `python -O` strips asserts), shared by the kernels and the fake kernels ----


def _concrete(n):
    """``n`` as a Python int: a symbolic size (torch.compile with dynamic shapes) is specialized (guarded)."""
    return int(n) if isinstance(n, torch.SymInt) else n


def _check_common(op, backend, device, relaxation=None, steepness=None, art_lambda=None):
    if not isinstance(backend, str) or backend not in ("cpu", "cuda", "triton"):
        raise ValueError(f"relaxops::{op}: backend must be 'cpu', 'cuda' or 'triton', got {backend!r}")
    _backend.require(f"relaxops::{op}", backend, device)
    if relaxation is not None:
        _checks.int_in_range(op, "relaxation", relaxation, 0, len(RELAXATIONS) - 1)
        # comparisons only (no math.isfinite): they also work on a symbolic float while compiling
        if (
            isinstance(steepness, bool)
            or not isinstance(steepness, (int, float, torch.SymFloat))
            or not 0 < steepness < math.inf
        ):
            raise ValueError(f"relaxops::{op}: steepness must be a finite number > 0, got {steepness!r}")
        if (
            isinstance(art_lambda, bool)
            or not isinstance(art_lambda, (int, float, torch.SymFloat))
            or not 0 <= art_lambda <= 1
        ):
            raise ValueError(f"relaxops::{op}: art_lambda must be a number in [0, 1], got {art_lambda!r}")


def _network(op: str, network, n) -> Network:
    """The network ``network`` on ``n`` wires (``n`` an integer in [1, 2^31))."""
    n = _checks.int_in_range(op, "n", _concrete(n), 1, _MAX_N)
    if not isinstance(network, str):
        raise TypeError(f"relaxops::{op}: network must be a str, got {type(network).__name__}")
    try:
        return resolve_network(network, n)
    except (KeyError, ValueError) as e:
        raise ValueError(f"relaxops::{op}: network {network!r} is not a network on n = {n} wires ({e})") from None


def _runs(op: str, network, n, B, device, backend, lengths, ks, m=None):
    """What the kernels run on ``B`` rows of ``n`` entries: the network (full rows), or with ``lengths`` (int64
    ``[B]``, each in ``[0, n]``) or ``ks`` (int64 ``[B]``, a top-k per row in ``[1, L_b]``, 0 for a row of length 0;
    the top-k matrix's right-aligned columns of ``m``) the ``RowNetworks`` of each row. Fake tensors get the network
    for ``n``, whose comparator count is the row stride (``networks.row_stride``)."""
    net = _network(op, network, n)
    if lengths is None and ks is None:
        return net
    n = net.n
    for name, t in (("lengths", lengths), ("ks", ks)):
        if t is not None:
            _checks.kernel_tensor(op, name, t, dtypes=(torch.int64,), device=device, shape=(B,))
    if any(_checks.values_unknown(t) for t in (lengths, ks) if t is not None):
        return net
    what = ("sortnet_rows", n)
    if B and not _checks.already_checked(what, *(t for t in (lengths, ks) if t is not None)):
        L = lengths if lengths is not None else torch.full((B,), n, dtype=torch.int64, device=device)
        bad_ks = f"relaxops::{op}: ks must lie in [1, lengths] (0 for a row of length 0)"
        if not _checks.on_host(L):
            _checks.assert_on_device((L >= 0) & (L <= n), f"relaxops::{op}: lengths must lie in [0, n] = [0, {n}]")
            if ks is not None:
                _checks.assert_on_device((ks <= L) & (ks >= (L > 0).long()), bad_ks)
        elif int(L.min()) < 0 or int(L.max()) > n:
            raise ValueError(f"relaxops::{op}: lengths must lie in [0, n] = [0, {n}]")
        elif ks is not None and bool(((ks > L) | (ks < (L > 0).long())).any()):
            raise ValueError(bad_ks)
        _checks.mark_checked(what, *(t for t in (lengths, ks) if t is not None))
    try:
        return row_networks(network, n, lengths, ks, n if m is None else m)
    except ValueError as e:
        raise ValueError(f"relaxops::{op}: {e}") from None


def _check_values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths, ks, op="sortnet_values_fwd"):
    _checks.kernel_tensor(op, "x", x, dtypes=_FLOATS, shape=(None, None))
    _check_common(op, backend, x.device, relaxation, steepness, art_lambda)
    return _runs(op, network, x.shape[1], x.shape[0], x.device, backend, lengths, ks)


def _check_values_bwd(
    grad_sorted, grad_alpha, d, alpha, n, network, relaxation, steepness, art_lambda, backend, lengths, ks
):
    op = "sortnet_values_bwd"
    _checks.kernel_tensor(op, "d", d, dtypes=_FLOATS, shape=(None, None))
    net = _runs(op, network, n, d.shape[0], d.device, backend, lengths, ks)
    C = _stride(net)
    _checks.kernel_tensor(op, "d", d, dtypes=_FLOATS, shape=(None, C))
    B, like = d.shape[0], dict(dtypes=(d.dtype,), device=d.device)
    _checks.kernel_tensor(op, "alpha", alpha, shape=(B, C), **like)
    if grad_sorted is not None:
        _checks.kernel_tensor(op, "grad_sorted", grad_sorted, shape=(B, net.n), **like)
    if grad_alpha is not None:
        _checks.kernel_tensor(op, "grad_alpha", grad_alpha, shape=(B, C), **like)
    _check_common(op, backend, d.device, relaxation, steepness, art_lambda)
    return net


def _check_rank_bwd(x, grad_rank, network, relaxation, steepness, art_lambda, backend, lengths):
    op = "sortnet_rank_bwd"
    _checks.kernel_tensor(op, "x", x, dtypes=_FLOATS, shape=(None, None))
    _checks.kernel_tensor(op, "grad_rank", grad_rank, dtypes=(x.dtype,), device=x.device, shape=tuple(x.shape))
    _check_common(op, backend, x.device, relaxation, steepness, art_lambda)
    return _runs(op, network, x.shape[1], x.shape[0], x.device, backend, lengths, None)


def _check_matrix(op, alpha, n, network, col_begin, backend, lengths, ks, grad_X=None):
    net = _network(op, network, n)
    col_begin = _checks.int_in_range(op, "col_begin", _concrete(col_begin), 0, net.n - 1)
    _checks.kernel_tensor(op, "alpha", alpha, dtypes=_FLOATS, shape=(None, None))
    if ks is None and lengths is not None and col_begin != 0:
        raise ValueError(f"relaxops::{op}: with lengths and no ks (a sort), col_begin must be 0, got {col_begin}")
    net = _runs(op, network, n, alpha.shape[0], alpha.device, backend, lengths, ks, net.n - col_begin)
    _checks.kernel_tensor(op, "alpha", alpha, shape=(None, _stride(net)))
    if grad_X is not None:
        _checks.kernel_tensor(
            op,
            "grad_X",
            grad_X,
            dtypes=(alpha.dtype,),
            device=alpha.device,
            shape=(alpha.shape[0], net.n - col_begin, net.n),
        )
    _check_common(op, backend, alpha.device)
    return net


def _fits(op: str, shape, dtype, device) -> None:
    _checks.output_fits(shape, dtype, device, f"relaxops::{op}: the output", "use a smaller batch")


# --- values: x -> (sorted, d, alpha) -------------------------------------------------------------------


@torch.library.custom_op("relaxops::sortnet_values_fwd", mutates_args=())
def values_fwd(
    x: Tensor,
    network: str,
    relaxation: int,
    steepness: float,
    art_lambda: float,
    backend: str,
    lengths: Optional[Tensor] = None,
    ks: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(sorted, d, alpha)`` of the rows of ``x [B, n]``; with ``lengths`` / ``ks`` (int64 ``[B]``) each row runs
    the network for its length (and top-k; ``networks.row_networks``): pads of ``sorted`` and the entries of ``d``
    and ``alpha`` that are not the row's network are 0."""
    net = _check_values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths, ks)
    C = _stride(net)
    _fits("sortnet_values_fwd", (x.shape[0], x.shape[1] + 2 * C), x.dtype, x.device)
    sorted_ = torch.empty_like(x)
    d = x.new_empty(x.shape[0], C)
    alpha = torch.empty_like(d)
    _kernels("sortnet_values_fwd", backend, x.device).values_forward(
        x, net, relaxation, steepness, art_lambda, sorted_, d, alpha
    )
    return sorted_, d, alpha


@values_fwd.register_fake
def _(x, network, relaxation, steepness, art_lambda, backend, lengths=None, ks=None):
    C = _stride(_check_values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths, ks))
    return torch.empty_like(x), x.new_empty(x.shape[0], C), x.new_empty(x.shape[0], C)


@torch.library.custom_op("relaxops::sortnet_values_bwd", mutates_args=())
def values_bwd(
    grad_sorted: Optional[Tensor],
    grad_alpha: Optional[Tensor],
    d: Tensor,
    alpha: Tensor,
    n: int,
    network: str,
    relaxation: int,
    steepness: float,
    art_lambda: float,
    backend: str,
    lengths: Optional[Tensor] = None,
    ks: Optional[Tensor] = None,
) -> Tensor:
    args = (n, network, relaxation, steepness, art_lambda, backend, lengths, ks)
    net = _check_values_bwd(grad_sorted, grad_alpha, d, alpha, *args)
    _fits("sortnet_values_bwd", (d.shape[0], n), d.dtype, d.device)
    grad_x = d.new_empty(d.shape[0], n)
    _kernels("sortnet_values_bwd", backend, d.device).values_backward(
        grad_sorted, grad_alpha, d, alpha, net, relaxation, steepness, art_lambda, grad_x
    )
    return grad_x


@values_bwd.register_fake
def _(grad_sorted, grad_alpha, d, alpha, n, network, relaxation, steepness, art_lambda, backend, lengths=None, ks=None):
    _check_values_bwd(
        grad_sorted, grad_alpha, d, alpha, n, network, relaxation, steepness, art_lambda, backend, lengths, ks
    )
    return d.new_empty(d.shape[0], n)


def _values_setup(ctx, inputs, output):
    x, network, relaxation, steepness, art_lambda, backend, lengths, ks = inputs
    _, d, alpha = output
    ctx.save_for_backward(d, alpha, lengths, ks)
    ctx.n = x.shape[1]
    ctx.args = (network, relaxation, steepness, art_lambda, backend)
    ctx.set_materialize_grads(False)


def _values_backward(ctx, grad_sorted, grad_d, grad_alpha):
    d, alpha, lengths, ks = ctx.saved_tensors
    grad_sorted = None if grad_sorted is None else grad_sorted.contiguous()
    grad_alpha = None if grad_alpha is None else grad_alpha.contiguous()
    grad_x = values_bwd(grad_sorted, grad_alpha, d, alpha, ctx.n, *ctx.args, lengths, ks)
    return grad_x, None, None, None, None, None, None, None


values_fwd.register_autograd(_values_backward, setup_context=_values_setup)


# --- matrix: alpha -> rows col_begin.. of X = P^T --------------------------------------------------------


@torch.library.custom_op("relaxops::sortnet_matrix_fwd", mutates_args=())
def matrix_fwd(
    alpha: Tensor,
    n: int,
    network: str,
    col_begin: int,
    backend: str,
    lengths: Optional[Tensor] = None,
    ks: Optional[Tensor] = None,
) -> Tensor:
    """Rows ``col_begin..`` of ``X = P^T`` as ``[B, n - col_begin, n]``; with ``lengths`` (a sort, ``col_begin =
    0``): row b's ``L_b x L_b`` block, 0 elsewhere; with ``ks`` (a top-k on the reversed network): row b's ``k_b``
    rows, right-aligned (the last ``k_b`` of the ``n - col_begin``)."""
    net = _check_matrix("sortnet_matrix_fwd", alpha, n, network, col_begin, backend, lengths, ks)
    _fits("sortnet_matrix_fwd", (alpha.shape[0], n - col_begin, n), alpha.dtype, alpha.device)
    X = alpha.new_empty(alpha.shape[0], n - col_begin, n)
    _kernels("sortnet_matrix_fwd", backend, alpha.device).matrix_forward(alpha, net, col_begin, X)
    return X


@matrix_fwd.register_fake
def _(alpha, n, network, col_begin, backend, lengths=None, ks=None):
    _check_matrix("sortnet_matrix_fwd", alpha, n, network, col_begin, backend, lengths, ks)
    return alpha.new_empty(alpha.shape[0], n - col_begin, n)


@torch.library.custom_op("relaxops::sortnet_matrix_bwd", mutates_args=())
def matrix_bwd(
    grad_X: Tensor,
    alpha: Tensor,
    n: int,
    network: str,
    col_begin: int,
    backend: str,
    lengths: Optional[Tensor] = None,
    ks: Optional[Tensor] = None,
) -> Tensor:
    net = _check_matrix("sortnet_matrix_bwd", alpha, n, network, col_begin, backend, lengths, ks, grad_X)
    grad_alpha = torch.empty_like(alpha)
    _kernels("sortnet_matrix_bwd", backend, alpha.device).matrix_backward(alpha, grad_X, net, col_begin, grad_alpha)
    return grad_alpha


@matrix_bwd.register_fake
def _(grad_X, alpha, n, network, col_begin, backend, lengths=None, ks=None):
    _check_matrix("sortnet_matrix_bwd", alpha, n, network, col_begin, backend, lengths, ks, grad_X)
    return torch.empty_like(alpha)


def _matrix_setup(ctx, inputs, output):
    alpha, n, network, col_begin, backend, lengths, ks = inputs
    ctx.save_for_backward(alpha, lengths, ks)
    ctx.args = (n, network, col_begin, backend)


def _matrix_backward(ctx, grad_X):
    alpha, lengths, ks = ctx.saved_tensors
    return matrix_bwd(grad_X.contiguous(), alpha, *ctx.args, lengths, ks), None, None, None, None, None, None


matrix_fwd.register_autograd(_matrix_backward, setup_context=_matrix_setup)


# --- ranks: x -> rank = X (1..n), without X -------------------------------------------------------------------


@torch.library.custom_op("relaxops::sortnet_rank_fwd", mutates_args=())
def rank_fwd(
    x: Tensor,
    network: str,
    relaxation: int,
    steepness: float,
    art_lambda: float,
    backend: str,
    lengths: Optional[Tensor] = None,
) -> Tensor:
    """Soft ranks ``[B, n]`` (ascending, 1-based: ``rank = P^T (1..n)``) of the rows of ``x``; with ``lengths``
    (int64 ``[B]``) each row's ranks ``1..L_b`` by the network for its length, 0 on its pads."""
    net = _check_values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths, None, "sortnet_rank_fwd")
    _fits("sortnet_rank_fwd", tuple(x.shape), x.dtype, x.device)
    rank = torch.empty_like(x)
    _kernels("sortnet_rank_fwd", backend, x.device).rank_forward(x, net, relaxation, steepness, art_lambda, rank)
    return rank


@rank_fwd.register_fake
def _(x, network, relaxation, steepness, art_lambda, backend, lengths=None):
    _check_values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths, None, "sortnet_rank_fwd")
    return torch.empty_like(x)


@torch.library.custom_op("relaxops::sortnet_rank_bwd", mutates_args=())
def rank_bwd(
    x: Tensor,
    grad_rank: Tensor,
    network: str,
    relaxation: int,
    steepness: float,
    art_lambda: float,
    backend: str,
    lengths: Optional[Tensor] = None,
) -> Tensor:
    """The gradient of ``x`` from that of its ranks (the values pass is recomputed: only ``x`` is saved)."""
    net = _check_rank_bwd(x, grad_rank, network, relaxation, steepness, art_lambda, backend, lengths)
    _fits("sortnet_rank_bwd", tuple(x.shape), x.dtype, x.device)
    grad_x = torch.empty_like(x)
    _kernels("sortnet_rank_bwd", backend, x.device).rank_backward(
        x, grad_rank, net, relaxation, steepness, art_lambda, grad_x
    )
    return grad_x


@rank_bwd.register_fake
def _(x, grad_rank, network, relaxation, steepness, art_lambda, backend, lengths=None):
    _check_rank_bwd(x, grad_rank, network, relaxation, steepness, art_lambda, backend, lengths)
    return torch.empty_like(x)


def _rank_setup(ctx, inputs, output):
    x, *args, lengths = inputs
    ctx.save_for_backward(x, lengths)
    ctx.args = args


def _rank_backward(ctx, grad_rank):
    x, lengths = ctx.saved_tensors
    return rank_bwd(x, grad_rank.contiguous(), *ctx.args, lengths), None, None, None, None, None, None


rank_fwd.register_autograd(_rank_backward, setup_context=_rank_setup)


class Rank(torch.autograd.Function):
    """What :func:`relaxops.rank` calls: the registered ops in a plain autograd Function, which ``torch.compile``
    traces. Eager calls launch the kernels directly: :func:`relaxops.rank` has checked the arguments and built ``x``
    (contiguous, float32/float64, its memory), and autograd passes a ``grad_rank`` of x's shape and dtype; the
    dispatcher, ``register_autograd``'s wrapper and the ops' checks cost ~60 us a forward and backward, more than
    the kernels at n = 100, B = 16. ``lengths``: int64 ``[B]`` or None (as ``rank_fwd``)."""

    @staticmethod
    def forward(ctx, x, network, relaxation, steepness, art_lambda, backend, lengths=None):
        ctx.args = (network, relaxation, steepness, art_lambda, backend)
        if torch.compiler.is_compiling():
            ctx.save_for_backward(x, None, lengths)
            return rank_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths)
        net = _runs("sortnet_rank_fwd", network, x.shape[1], x.shape[0], x.device, backend, lengths, None)
        rank = torch.empty_like(x)
        if backend == "cpu" and ctx.needs_input_grad[0]:
            # the values pass's d and alpha, so that the backward does not recompute it (about half its work)
            saved = _CpuKernels.rank_saved(x, net)
            _CpuKernels.rank_forward(x, net, relaxation, steepness, art_lambda, rank, saved)
        else:
            saved = None
            _kernels("sortnet_rank_fwd", backend, x.device).rank_forward(
                x, net, relaxation, steepness, art_lambda, rank
            )
        ctx.net = net
        ctx.save_for_backward(x, saved, lengths)
        return rank

    @staticmethod
    def backward(ctx, grad_rank):
        x, saved, lengths = ctx.saved_tensors
        network, relaxation, steepness, art_lambda, backend = ctx.args
        none = (None,) * 6
        # the registered op under create_graph too: its output then raises on a double backward (the kernels'
        # output alone would not be connected to x, and a second derivative would silently miss this term)
        if torch.compiler.is_compiling() or torch.is_grad_enabled():
            return rank_bwd(x, grad_rank.contiguous(), *ctx.args, lengths), *none
        grad_x = torch.empty_like(x)
        net, grad_rank = ctx.net, grad_rank.to(x.dtype).contiguous()
        if saved is not None:
            _CpuKernels.rank_backward(x, grad_rank, net, relaxation, steepness, art_lambda, grad_x, saved)
        else:
            _kernels("sortnet_rank_bwd", backend, x.device).rank_backward(
                x, grad_rank, net, relaxation, steepness, art_lambda, grad_x
            )
        return grad_x, *none


def sort(
    x: Tensor,
    network: str,
    relaxation: int,
    steepness: float,
    art_lambda: float,
    return_matrix: bool,
    backend: str,
    lengths: Optional[Tensor] = None,
):
    """Relaxed sort of ``x [B, n]`` (contiguous, float32/float64) -> ``(sorted, X or None)``; ``lengths``: int64
    ``[B]`` or None."""
    sorted_, _, alpha = values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths)
    X = matrix_fwd(alpha, x.shape[1], network, 0, backend, lengths) if return_matrix else None
    return sorted_, X


def _reverse_alpha(alpha: Tensor, n: int, network: str, lengths, ks) -> Tensor:
    """Row b's alphas in reverse order of its network's ``C_g`` comparators (0 beyond): ``alpha.flip(-1)`` when
    every row runs a network of ``C`` comparators (full rows, bitonic, odd_even), its own inverse."""
    if (lengths is None and ks is None) or network.partition(":")[0] in PREFIX_NETWORKS:
        return alpha.flip(-1).contiguous()
    if _checks.values_unknown(alpha):
        raise NotImplementedError(
            f"relaxops: a top-k on {network!r} with lengths or a k per row builds the network of each row from the "
            "values of lengths and k, which torch.compile does not trace; use bitonic or odd_even, or eager mode"
        )
    rn = row_networks(network, n, lengths, ks, n)  # (the output columns play no part here)
    Cg = _checks.to_device([g.num_comparators for g in rn.nets], torch.int64, alpha.device)[rn.spec[:, 0]]
    c = torch.arange(alpha.shape[1], device=alpha.device)
    rev = alpha.gather(1, (Cg[:, None] - 1 - c).clamp(min=0))
    return torch.where(c < Cg[:, None], rev, 0.0).contiguous()


class _TopK(torch.autograd.Function):
    """The top-k matrix ``[B, n, k]`` from the values pass's ``alpha``, or with ``rows`` (int64 ``[B]``) its rows
    ``X[b, rows[b]]`` as ``[B, k]``, for eager CPU calls: the CPU matrix kernels in their top-k layout read
    ``alpha`` from the last comparator back and write ``X`` (and read its gradient) in its final layout, where the
    registered ops need ``alpha.flip``, a transposed copy and, for rows, a gather whose backward fills a
    ``[B, n, k]`` gradient: parallel PyTorch ops, which stall when other processes share the cores
    (docs/shared-cpu.md). ``lengths``, ``ks``: as ``topk``."""

    @staticmethod
    def forward(ctx, alpha, n, network, k, backend, rows, lengths, ks):
        rkey = reversed_key(network)
        net = _runs("sortnet_matrix_fwd", rkey, n, alpha.shape[0], alpha.device, backend, lengths, ks, k)
        shape = (alpha.shape[0], k) if rows is not None else (alpha.shape[0], n, k)
        _fits("sortnet_matrix_fwd", shape, alpha.dtype, alpha.device)
        X = alpha.new_empty(shape)
        _CpuKernels.matrix_forward(alpha, net, n - k, X, topk_layout=True, rows=rows)
        ctx.save_for_backward(alpha, rows, lengths, ks)
        ctx.args = (net, n, network, k, backend)
        return X

    @staticmethod
    def backward(ctx, grad_X):
        alpha, rows, lengths, ks = ctx.saved_tensors
        net, n, network, k, backend = ctx.args
        none = (None,) * 7
        if torch.is_grad_enabled():  # create_graph: the registered ops, whose output refuses a double backward
            if rows is not None:
                full = grad_X.new_zeros(grad_X.shape[0], n, k)
                full[torch.arange(grad_X.shape[0]), rows] = grad_X
                grad_X = full
            grad_Xt = grad_X.transpose(1, 2).contiguous()
            rev = _reverse_alpha(alpha, n, network, lengths, ks)
            g = matrix_bwd(grad_Xt, rev, n, reversed_key(network), n - k, backend, lengths, ks)
            return _reverse_alpha(g, n, network, lengths, ks), *none
        grad_alpha = torch.empty_like(alpha)
        _CpuKernels.matrix_backward(alpha, grad_X.contiguous(), net, n - k, grad_alpha, topk_layout=True, rows=rows)
        return grad_alpha, *none


def topk(
    x: Tensor,
    k: int,
    network: str,
    relaxation: int,
    steepness: float,
    art_lambda: float,
    backend: str,
    rows: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
    ks: Optional[Tensor] = None,
):
    """Relaxed top-k matrix of ``x [B, n]`` (contiguous, float32/float64) -> ``[B, n, k]`` (the last k columns
    of ``X = P^T``), bi-directionally: values forward over the network, then the k rows of ``P`` from the last
    layer back (the matrix kernel on the reversed network, alphas reversed). With ``rows`` (int64 ``[B]``, in
    ``[0, n)``): only ``X[b, rows[b]]``, ``[B, k]``. ``lengths`` (int64 ``[B]``) and ``ks`` (int64 ``[B]``, each in
    ``[1, L_b]``, 0 for an empty row): row b's top ``k_b`` of its ``L_b`` entries, in columns ``k - k_b ..``."""
    n = x.shape[1]
    if lengths is not None and ks is None:
        ks = torch.clamp(lengths, max=k)
    _, _, alpha = values_fwd(x, network, relaxation, steepness, art_lambda, backend, lengths, ks)
    if backend == "cpu" and not torch.compiler.is_compiling():
        return _TopK.apply(alpha, n, network, k, backend, rows, lengths, ks)
    rev = _reverse_alpha(alpha, n, network, lengths, ks)
    Xt = matrix_fwd(rev, n, reversed_key(network), n - k, backend, lengths, ks)  # [B, k, n]
    if rows is not None:
        return Xt.gather(2, rows.view(-1, 1, 1).expand(-1, k, 1)).squeeze(2)
    return Xt.transpose(1, 2).contiguous()


class _Preselect(torch.autograd.Function):
    """The top-k loss's preselection on the CPU (``topk_preselect`` of sortnet.h): ``x [B, n]`` (contiguous,
    float32/float64), ``target`` int64 ``[B]`` -> ``[x[b, target[b]], the m - 1 largest others, descending]``;
    one kernel each way instead of PyTorch's scatter, topk, cat and their backwards over ``[B, n]``."""

    @staticmethod
    def forward(ctx, x, target, m):
        B, n = x.shape
        values = x.new_empty(B, m)
        index = torch.empty(B, m, dtype=torch.int64)
        _ext._C.topk_preselect_forward(
            _ext.dtype_code(x), B, n, m, _ext.ptr(x), _ext.ptr(target), _ext.ptr(values), _ext.ptr(index)
        )
        ctx.save_for_backward(index)
        ctx.n = n
        return values

    @staticmethod
    def backward(ctx, grad_values):
        (index,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a scatter that autograd can differentiate again
            return grad_values.new_zeros(index.shape[0], ctx.n).scatter(1, index, grad_values), None, None
        grad_values = grad_values.contiguous()
        grad_x = grad_values.new_empty(index.shape[0], ctx.n)
        _ext._C.topk_preselect_backward(
            _ext.dtype_code(grad_values),
            index.shape[0],
            ctx.n,
            index.shape[1],
            _ext.ptr(grad_values),
            _ext.ptr(index),
            _ext.ptr(grad_x),
        )
        return grad_x, None, None


class _LabelSoftmax(torch.autograd.Function):
    """``softmax(x)[b, index[b]]`` of ``x [B, n]`` (contiguous, float32/float64, CPU) as ``[B]``: the top-k loss's
    top-1 term, one pass per row each way, where PyTorch's softmax runs in parallel from 128 rows."""

    @staticmethod
    def forward(ctx, x, index):
        p = x.new_empty(x.shape[0])
        _ext._C.label_softmax_forward(
            _ext.dtype_code(x), x.shape[0], x.shape[1], _ext.ptr(x), _ext.ptr(index), _ext.ptr(p)
        )
        ctx.save_for_backward(x, index, p)
        return p

    @staticmethod
    def backward(ctx, grad_p):
        x, index, p = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the same gradient from PyTorch ops, differentiable again
            sm = torch.softmax(x, -1)
            onehot = torch.zeros_like(sm).scatter(1, index.view(-1, 1), 1.0)
            return (grad_p * sm.gather(1, index.view(-1, 1)).squeeze(1)).unsqueeze(1) * (onehot - sm), None
        grad_p = grad_p.contiguous()
        grad_x = torch.empty_like(x)
        _ext._C.label_softmax_backward(
            _ext.dtype_code(x),
            x.shape[0],
            x.shape[1],
            _ext.ptr(x),
            _ext.ptr(index),
            _ext.ptr(p),
            _ext.ptr(grad_p),
            _ext.ptr(grad_x),
        )
        return grad_x, None


def label_softmax(x: Tensor, index: Tensor) -> Tensor:
    """:class:`_LabelSoftmax` of ``x [B, n]`` (float32/float64 on the CPU) and ``index [B]`` (in [0, n))."""
    return _LabelSoftmax.apply(x.contiguous(), index.contiguous())


def preselect(x: Tensor, target: Tensor, m: int) -> Tensor:
    """:class:`_Preselect` of ``x [B, n]`` (float32/float64 on the CPU) and ``target [B]`` (indices in [0, n))."""
    return _Preselect.apply(x.contiguous(), target.contiguous(), m)
