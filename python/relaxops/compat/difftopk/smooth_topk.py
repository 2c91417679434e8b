"""``difftopk.smooth_topk``: ``SmoothTopKLoss`` and ``SmoothHardTopKLoss`` (Berrada et al.'s smooth top-k SVM
losses, see the package docstring).

Left out: the building blocks of difftopk's log-space recursion (``LogSumExp``, ``LogSumExp_F``, ``LogTensor``,
``Multiplication``, ``divide_and_conquer``, ``recursion``, ``approximation``, ``d_logS_d_expX``, ``log``,
``log1mexp``, ``delta``, ``split``, ``detect_large``) and its per-sample loss closures ``Topk_Smooth_SVM`` /
``Topk_Hard_SVM``: relaxops computes the loss in one function, :func:`relaxops.baselines.smooth_topk_svm_loss`
(``reduction="none"`` gives the per-sample losses those closures return).
"""

from __future__ import annotations

import torch

from ...baselines import smooth_topk as _smooth_topk

__all__ = ["SmoothTopKLoss", "SmoothHardTopKLoss"]


class SmoothTopKLoss(_smooth_topk.SmoothTopKLoss):
    """difftopk's ``SmoothTopKLoss(num_classes, k, tau, device)``: the smooth top-k SVM loss of every sample,
    summed and divided by the batch size (see :func:`relaxops.baselines.smooth_topk_svm_loss`)."""

    def __init__(self, num_classes, k, tau=1, device="cpu"):
        super().__init__(num_classes, k, tau)
        self.device = device

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``x [B, num_classes]`` scores, ``y [B]`` labels (difftopk's argument names) -> the scalar loss."""
        return super().forward(x, y)


class SmoothHardTopKLoss(_smooth_topk.SmoothHardTopKLoss):
    """difftopk's ``SmoothHardTopKLoss(num_classes, k, tau, device)``: the hard top-k SVM loss where the k-th
    and (k+1)-th scores are far apart (``>= k tau ln 1000``), the smooth one elsewhere."""

    def __init__(self, num_classes, k, tau=1, device="cpu"):
        super().__init__(num_classes, k, tau)
        self.device = device

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``x [B, num_classes]`` scores, ``y [B]`` labels (difftopk's argument names) -> the scalar loss."""
        return super().forward(x, y)
