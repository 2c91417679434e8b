"""Perturbed structured predictors as ``torch.nn.Module`` s (docs/math/training.md §6.6), built on ``perturbed_direct``.

Each module maps scores to a hard structure (one-hot, k-hot, permutation matrix). In training mode it adds noise
``σ Γ`` and back-propagates direct-loss gradients to the scores and to σ; in eval mode (``module.eval()``) it adds
no noise and returns ``solver(theta)``. The noise scale σ is, in this order of precedence:

* ``sigma_module(x)``: any network returning a positive ``[B]`` tensor (reference: a linear layer + softplus),
  evaluated on the ``x`` given to ``forward`` (or on the scores when none is given);
* a learnable scalar ``softplus(ρ)`` (``learn_sigma=True``, initialised so that σ = ``sigma``);
* the fixed constant ``sigma`` (``learn_sigma=False``); ``sigma=0`` is plain direct loss minimisation (no noise)
  and ``sigma=1`` the fixed-noise baseline.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .noise import check_noise_kind
from .perturbed import EPS_MODES, GRAD_SCALES, REDUCES, _check_choice, _check_eps, _check_n_samples, perturbed_direct
from .solvers import argmax_onehot, assignment, sort_perm, topk_khot


def _inverse_softplus(s: float) -> float:
    return s + math.log(-math.expm1(-s))  # log(exp(s) - 1), stable for large s


class _Perturbed(nn.Module):
    def __init__(
        self,
        sigma_module=None,
        sigma: float = 1.0,
        learn_sigma: bool = True,
        eps: float = -1.0,
        n_samples: int = 1,
        noise: str = "gumbel0",
        reduce: str = "mean",
        grad_scale: str = "inv_eps",
        eps_mode: str = "absolute",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if sigma_module is not None and not callable(sigma_module):
            raise TypeError(f"sigma_module must be a callable x -> sigma [B], got {type(sigma_module).__name__}")
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (0 <= sigma < math.inf):
            raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
        if not isinstance(learn_sigma, bool):
            raise TypeError(f"learn_sigma must be a bool, got {learn_sigma!r}")
        if sigma_module is None and learn_sigma and sigma <= 0:
            raise ValueError("a learnable sigma = softplus(rho) must start > 0; use learn_sigma=False for sigma = 0")
        self.sigma_module = sigma_module
        self.eps = _check_eps(eps)
        self.n_samples = _check_n_samples(n_samples)
        self.noise = check_noise_kind(noise)
        self.reduce = _check_choice(reduce, "reduce", REDUCES)
        self.grad_scale = _check_choice(grad_scale, "grad_scale", GRAD_SCALES)
        self.eps_mode = _check_choice(eps_mode, "eps_mode", EPS_MODES)
        self.generator = generator
        if sigma_module is None and learn_sigma:
            self.rho = nn.Parameter(torch.tensor(_inverse_softplus(float(sigma))))
        else:
            self.rho = None
        self.fixed_sigma = float(sigma)

    def sigma(self, x=None, theta=None):
        """The current noise scale: ``[B]`` from sigma_module, a 0-dim tensor softplus(ρ), or the fixed float."""
        if self.sigma_module is not None:
            return self.sigma_module(x if x is not None else theta)
        if self.rho is not None:
            return nn.functional.softplus(self.rho)
        return self.fixed_sigma

    def _theta(self, scores: torch.Tensor) -> torch.Tensor:
        return scores

    def _solver(self, theta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _eval_solve(self, scores: torch.Tensor) -> torch.Tensor:
        return self._solver(self._theta(scores))

    def forward(self, scores: torch.Tensor, x=None) -> torch.Tensor:
        """scores ``[B, *S]`` (PerturbedSort: ``[B, n]``); ``x``: the input of ``sigma_module`` (default: scores).
        Returns the structure ``[B, *S]`` (the mean of the samples), or ``[n_samples, B, *S]`` with reduce='none'
        (eval mode: the noise-free solution, without the sample dimension)."""
        if not self.training:
            return self._eval_solve(scores)
        sigma = self.sigma(x, scores)
        if isinstance(sigma, float) and sigma == 0:
            sigma = None  # plain direct loss minimisation: no noise drawn
        if isinstance(sigma, torch.Tensor) and sigma.dtype != scores.dtype:
            sigma = sigma.to(scores.dtype)
        return perturbed_direct(
            self._theta(scores),
            sigma,
            self._solver,
            eps=self.eps,
            n_samples=self.n_samples,
            noise=self.noise,
            reduce=self.reduce,
            grad_scale=self.grad_scale,
            eps_mode=self.eps_mode,
            generator=self.generator,
        )

    def extra_repr(self) -> str:
        sigma = (
            "sigma_module"
            if self.sigma_module is not None
            else "learnable sigma"
            if self.rho is not None
            else f"sigma={self.fixed_sigma}"
        )
        return f"{sigma}, eps={self.eps}, n_samples={self.n_samples}, noise={self.noise!r}"


class PerturbedArgmax(_Perturbed):
    """Perturbed categorical prediction: scores ``[B, m]`` -> one-hot ``[B, m]`` (``argmax_onehot``).
    Arguments: see ``relaxops.training.modules`` and ``perturbed_direct``."""

    def _solver(self, theta):
        return argmax_onehot(theta)


class PerturbedTopK(_Perturbed):
    """Perturbed top-k subset: scores ``[B, n]`` -> k-hot ``[B, n]`` (``topk_khot``)."""

    def __init__(self, k: int, sigma_module=None, **kwargs):
        super().__init__(sigma_module, **kwargs)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        self.k = k

    def _solver(self, theta):
        if theta.shape[-1] < self.k:
            raise ValueError(f"k = {self.k} is larger than the number of scores {theta.shape[-1]}")
        return topk_khot(theta, self.k)

    def extra_repr(self) -> str:
        return f"k={self.k}, " + super().extra_repr()


class PerturbedMatching(_Perturbed):
    """Perturbed maximum-weight perfect matching: scores ``[B, d, d]`` -> permutation matrix ``[B, d, d]``
    (``assignment``; ``theta[b, i, j]`` is the score of matching row i to column j)."""

    def _solver(self, theta):
        return assignment(theta)


class PerturbedSort(_Perturbed):
    """Perturbed sorting: scores ``s [B, n]`` -> permutation matrix ``[B, n, n]``, ``P[b, i, j] = 1`` iff element i
    takes (descending) position j. The scores become the matching scores ``θ_ij = s_i c_j`` with the strictly
    decreasing ``c = linspace(1, -1, n)``; noise is added to all n² entries of θ and ``assignment`` solves them
    (gradients reach s through θ). Eval mode: ``sort_perm(s)``, the same permutation without noise."""

    def _theta(self, scores):
        if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
            raise ValueError(f"scores must be [B, n], got {getattr(scores, 'shape', type(scores).__name__)}")
        n = scores.shape[-1]
        c = torch.linspace(1.0, -1.0, n, dtype=scores.dtype, device=scores.device) if n > 1 else scores.new_ones(1)
        return scores.unsqueeze(-1) * c

    def _solver(self, theta):
        return assignment(theta)

    def _eval_solve(self, scores):
        self._theta(scores)  # checks the shape
        return sort_perm(scores)
