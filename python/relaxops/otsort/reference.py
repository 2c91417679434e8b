"""Pure-PyTorch optimal-transport sort (docs/math/otsort.md): the test oracle and the fallback backend.

Written for clarity (the dense ``[R, n, m]`` cost and plan) and float64 correctness; never changed to match a
kernel. One problem per row: squashed inputs ``xs [R, n]`` with log-weights ``loga [R, n]``, targets ``y [R, m]``
with log-weights ``logb [R, m]`` (weights positive, summing to 1 per row). With ``lengths`` / ``target_lengths``
(int64 ``[R]``, None = full rows), row ``r`` is the problem of its first ``lengths[r]`` sources and
``target_lengths[r]`` targets (weights summing to 1 over those): the other entries are never used, and every output
is 0 there (a row without a source or a target is empty: outputs 0, ``eps`` = epsilon, ``iters`` = 0), as in
``csrc/otsort/otsort.h``.

* :func:`sinkhorn`: the annealed log-domain Sinkhorn loop of ``csrc/otsort/otsort.h`` (same schedule, same
  stopping rule, same returned state); differentiating through it with autograd is the *unrolled* backward.
* :func:`sinkhorn_implicit`: the same forward with the *implicit* backward at convergence, here by the dense
  pseudo-inverse of the ``(n + m)`` optimality system (the kernels use conjugate gradients).
* :func:`plan` and :func:`apply`: the transport plan and its read-outs.

The cost is ``C_ij = -2 xs_i y_j``, the cross term of ``(xs_i - y_j)^2``: the squares are row and column terms, which
only shift the potentials (the same plan at every fixed point), while their size would cancel in every exponent.
"""

from __future__ import annotations

import math

import torch

CHECK_EVERY = 5  # kOtCheckEvery


def cost(xs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``C [R, n, m] = -2 xs_i y_j``: the squared distance ``(xs_i - y_j)^2`` less its row term ``xs_i^2`` and
    column term ``y_j^2``, which the potentials absorb (the same plan at every fixed point)."""
    return -2 * xs.unsqueeze(-1) * y.unsqueeze(-2)


def valid(lengths, R: int, size: int, device) -> torch.Tensor:
    """``[R, size]`` bool: True on the first ``lengths[r]`` entries of row ``r`` (every entry where None)."""
    if lengths is None:
        return torch.ones(R, size, dtype=torch.bool, device=device)
    return torch.arange(size, device=device) < lengths.unsqueeze(-1)


def _masks(xs, y, lengths, target_lengths):
    """``(vn [R, n], vm [R, m], empty [R])``: the real sources and targets of the rows that are not empty."""
    R, n = xs.shape
    vn, vm = valid(lengths, R, n, xs.device), valid(target_lengths, R, y.shape[1], xs.device)
    empty = ~(vn.any(-1) & vm.any(-1))
    return vn & ~empty.unsqueeze(-1), vm & ~empty.unsqueeze(-1), empty


def schedule(epsilon: float, epsilon0: float, decay: float, count: int) -> list[float]:
    """The epsilon of iterations ``0 .. count - 1``: ``e_0 = max(epsilon0, epsilon)``, ``e_{t+1} = max(decay e_t,
    epsilon)`` (in double precision, as the kernels)."""
    out, e = [], max(epsilon0, epsilon)
    for _ in range(count):
        out.append(e)
        e = max(decay * e, epsilon)
    return out


def sinkhorn(xs, y, loga, logb, epsilon, epsilon0, decay, tolerance, max_iterations, lengths=None, target_lengths=None):
    """``(f [R, n], g [R, m], eps [R], iters [R])``: the potentials at the stop, the epsilon of the last update and
    the number of iterations of each row. Rows with a non-finite (real) entry get NaN potentials at once."""
    vn, vm, empty = _masks(xs, y, lengths, target_lengths)
    zero = xs.new_zeros(())
    xs, loga, y, logb = (torch.where(v, t, zero) for v, t in ((vn, xs), (vn, loga), (vm, y), (vm, logb)))
    C = cost(xs, y)
    R, n, m = C.shape
    f, g = xs.new_zeros(R, n), xs.new_zeros(R, m)
    finite = torch.cat([xs, y, loga, logb], -1).isfinite().all(-1)
    active = finite & ~empty
    # the log-sum-exps run over the real entries (over all of an empty row's, whose outputs are 0 whatever they are:
    # no sum of -inf only, whose gradient would be NaN)
    ln = (vn | empty.unsqueeze(-1)).unsqueeze(-1)
    lm = (vm | empty.unsqueeze(-1)).unsqueeze(-2)
    iters = torch.zeros(R, dtype=torch.int32, device=xs.device)
    eps = torch.full((R,), math.nan, dtype=xs.dtype, device=xs.device)
    e_prev = None
    for t, e in enumerate(schedule(epsilon, epsilon0, decay, max_iterations)):
        g_new = e * logb - e * torch.logsumexp(torch.where(ln, (f.unsqueeze(-1) - C) / e, -math.inf), dim=-2)
        if t > 0 and t % CHECK_EVERY == 0 and e_prev == epsilon:
            # column marginals of the state (f^t, g^t): b_j exp((g^t_j - g^{t+1}_j) / e), over the real targets
            err = torch.where(vm, torch.expm1((g - g_new) / e).abs(), zero).amax(-1)
            active = active & ~(err <= tolerance)
        if not bool(active.any()):
            break
        f_new = e * loga - e * torch.logsumexp(torch.where(lm, (g_new.unsqueeze(-2) - C) / e, -math.inf), dim=-1)
        f = torch.where(active.unsqueeze(-1) & vn, f_new, f)
        g = torch.where(active.unsqueeze(-1) & vm, g_new, g)
        iters = iters + active.int()
        eps = torch.where(active, torch.full_like(eps, e), eps)
        e_prev = e
    bad = ~finite.unsqueeze(-1)
    f = torch.where(bad & vn, math.nan, f)
    g = torch.where(bad & vm, math.nan, g)
    eps = torch.where(empty, epsilon, eps)
    return f, g, eps, iters


def plan(xs, y, f, g, eps, lengths=None, target_lengths=None) -> torch.Tensor:
    """``T [R, n, m] = exp((f_i + g_j - C_ij) / e)`` on the real entries, 0 elsewhere."""
    vn, vm, _ = _masks(xs, y, lengths, target_lengths)
    real = vn.unsqueeze(-1) & vm.unsqueeze(-2)
    zero = xs.new_zeros(())
    xs, f, y, g = (torch.where(v, t, zero) for v, t in ((vn, xs), (vn, f), (vm, y), (vm, g)))
    return torch.where(real, torch.exp((f.unsqueeze(-1) + g.unsqueeze(-2) - cost(xs, y)) / eps[:, None, None]), zero)


def apply(T, loga, logb, u, v, lengths=None, target_lengths=None):
    """``(cols [R, m], rows [R, n])``: ``cols_j = sum_i T_ij u_i / b_j``, ``rows_i = sum_j T_ij v_j / a_i`` on the
    real entries, 0 elsewhere."""
    vn, vm, _ = _masks(u, v, lengths, target_lengths)
    zero = T.new_zeros(())
    u, v = torch.where(vn, u, zero), torch.where(vm, v, zero)
    a, b = torch.where(vn, loga, zero).exp(), torch.where(vm, logb, zero).exp()
    cols = torch.where(vm, torch.einsum("rij,ri->rj", T, u) / b, zero)
    rows = torch.where(vn, torch.einsum("rij,rj->ri", T, v) / a, zero)
    return cols, rows


class _ImplicitSinkhorn(torch.autograd.Function):
    """The forward of :func:`sinkhorn` without a graph; the backward solves the linearised optimality conditions
    ``r(f, g) = a``, ``c(f, g) = b`` (row / column sums of T) at the returned potentials:
    ``H (nu_f, nu_g) = (gf, gg)`` with ``H = [[diag(r), T], [T^t, diag(c)]]`` (pseudo-inverse); then
    ``gC = T (nu_f_i + nu_g_j)``, ``g log a = e a nu_f``, ``g log b = e b nu_g``."""

    @staticmethod
    def forward(ctx, xs, y, loga, logb, epsilon, epsilon0, decay, tolerance, max_iterations, lengths, target_lengths):
        loop = (epsilon, epsilon0, decay, tolerance, max_iterations)
        f, g, eps, iters = sinkhorn(xs, y, loga, logb, *loop, lengths, target_lengths)
        ctx.save_for_backward(xs, y, loga, logb, f, g, eps, lengths, target_lengths)
        ctx.mark_non_differentiable(eps, iters)
        return f, g, eps, iters

    @staticmethod
    def backward(ctx, gf, gg, _geps, _giters):
        xs, y, loga, logb, f, g, eps, lengths, target_lengths = ctx.saved_tensors
        n = f.shape[-1]
        vn, vm, _ = _masks(xs, y, lengths, target_lengths)
        zero = xs.new_zeros(())
        # the pads' rows and columns of H are 0 (T is 0 there): the minimum-norm solution is 0 there
        xs, loga, y, logb = (torch.where(v, t, zero) for v, t in ((vn, xs), (vn, loga), (vm, y), (vm, logb)))
        gf, gg = torch.where(vn, gf, zero), torch.where(vm, gg, zero)
        T = plan(xs, y, f, g, eps, lengths, target_lengths)
        r, c = T.sum(-1), T.sum(-2)
        H = torch.cat(
            [torch.cat([torch.diag_embed(r), T], -1), torch.cat([T.transpose(-1, -2), torch.diag_embed(c)], -1)], -2
        )
        rhs = torch.cat([gf, gg], -1)
        # minimum-norm solution: H is singular along (1, -1), and along more directions where the plan's bipartite
        # graph falls apart (entries that underflow to 0); nu_f_i + nu_g_j is the same for every solution
        ok = eps.isfinite()  # rows of the forward that were NaN stay NaN
        H = torch.where(ok[:, None, None], H, torch.eye(n + g.shape[-1], dtype=H.dtype, device=H.device))
        nu = (torch.linalg.pinv(H, hermitian=True) @ rhs.unsqueeze(-1)).squeeze(-1)
        nu = torch.where(ok[:, None] | ~torch.cat([vn, vm], -1), nu, math.nan)
        nu_f, nu_g = nu[:, :n], nu[:, n:]
        with torch.enable_grad():
            xs_, y_ = xs.detach().requires_grad_(True), y.detach().requires_grad_(True)
            C = cost(xs_, y_)
            gxs, gy = torch.autograd.grad(C, (xs_, y_), T * (nu_f.unsqueeze(-1) + nu_g.unsqueeze(-2)))
        e = eps.unsqueeze(-1)
        gla, glb = e * loga.exp() * nu_f, e * logb.exp() * nu_g
        gxs, gla, gy, glb = (torch.where(v, t, zero) for v, t in ((vn, gxs), (vn, gla), (vm, gy), (vm, glb)))
        return gxs, gy, gla, glb, None, None, None, None, None, None, None


def sinkhorn_implicit(
    xs, y, loga, logb, epsilon, epsilon0, decay, tolerance, max_iterations, lengths=None, target_lengths=None
):
    """:func:`sinkhorn` with the implicit backward."""
    loop = (epsilon, epsilon0, decay, tolerance, max_iterations)
    return _ImplicitSinkhorn.apply(xs, y, loga, logb, *loop, lengths, target_lengths)
