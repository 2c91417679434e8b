"""Thermometer binarization of real inputs for logic gate networks: fixed and learnable thresholds.

A thermometer code turns each value ``x`` into ``K`` bits ``x > t_1, ..., x > t_K`` (strict comparisons, as the
threshold encodings of difflogic's CIFAR-10 experiments, docs/math/logic.md §5). Inputs are ``[B, C, *S]``
(``C`` channels or features, any spatial dims ``S``, e.g. ``[B, C, H, W]`` images or ``[B, N]`` tables); outputs
``[B, C K, *S]`` in the input's dtype, with one of two layouts of the ``C K`` output channels:

* ``"channel_major"`` (default; torchlogix's layout): channel ``c K + k`` is bit ``k`` of input channel ``c``;
* ``"threshold_major"`` (difflogic's CIFAR-10 encoding, which concatenates the thresholded images): channel
  ``k C + c``.

Thresholds are ``[K]`` (shared by all channels) or ``[C, K]`` (one set per channel). Uniform thresholds on
``[low, high]`` are ``low + (high - low) i / (K + 1)``, ``i = 1..K`` (``K = 3`` on ``[0, 1]``: 0.25, 0.5, 0.75, the
``cifar-10-3-thresholds`` encoding; ``K = 31``: ``i / 32``). ``fit(x)`` sets them from data: ``"uniform"`` on
each channel's (or the global) ``[min, max]``, or ``"quantile"``: the ``i / (K + 1)`` quantiles with linear
interpolation between order statistics (numpy's default; torchlogix's "distributive" thresholds take the order
statistic at index ``floor(n i / (K + 1))`` instead, without interpolation).
"""

from __future__ import annotations

import numbers

import torch

from .. import _checks

LAYOUTS = ("channel_major", "threshold_major")
FIT_METHODS = ("uniform", "quantile")
RELAXATIONS = ("sigmoid", "straight_through")


def uniform_thresholds(num_bits: int, low, high) -> torch.Tensor:
    """``low + (high - low) i / (num_bits + 1)`` for ``i = 1..num_bits``, float64; ``low`` / ``high`` scalars
    (-> ``[K]``) or ``[C]`` tensors (-> ``[C, K]``)."""
    low, high = torch.as_tensor(low, dtype=torch.float64), torch.as_tensor(high, dtype=torch.float64)
    frac = torch.arange(1, num_bits + 1, dtype=torch.float64) / (num_bits + 1)
    return low.unsqueeze(-1) + (high - low).unsqueeze(-1) * frac


def _check_num_bits(num_bits) -> int:
    if isinstance(num_bits, bool) or not isinstance(num_bits, numbers.Integral) or num_bits < 1:
        raise ValueError(f"num_bits must be an integer >= 1, got {num_bits!r}")
    return int(num_bits)


def _check_thresholds(t, name: str, num_bits: int | None, ordered: bool) -> torch.Tensor:
    """Thresholds as a float64 ``[K]`` or ``[C, K]`` tensor, finite (and non-decreasing along K if ``ordered``)."""
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{name} must be real numbers, got {t.dtype}")
        t = t.detach().to("cpu", torch.float64)
    else:
        try:
            t = torch.tensor(t, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"{name} must be a tensor or a (nested) sequence of numbers, got {t!r}") from e
    if t.dim() not in (1, 2) or t.shape[-1] < 1 or t.numel() == 0:
        raise ValueError(f"{name} must have shape [K] or [C, K] with K, C >= 1, got {tuple(t.shape)}")
    if num_bits is not None and t.shape[-1] != num_bits:
        raise ValueError(f"{name} has {t.shape[-1]} thresholds per channel, num_bits is {num_bits}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite")
    if ordered and (t.diff(dim=-1) < 0).any():
        raise ValueError(f"{name} must be non-decreasing along the last dimension (a thermometer code)")
    return t


def _check_input(x, thresholds: torch.Tensor, name: str = "x") -> None:
    _checks.floating_tensor(x, name, min_dim=2)
    if thresholds.dim() == 2 and x.shape[1] != thresholds.shape[0]:
        raise ValueError(
            f"{name} has {x.shape[1]} channels (dim 1), the per-channel thresholds are for "
            f"{thresholds.shape[0]}; shape {tuple(x.shape)}"
        )


def fit_thresholds(x: torch.Tensor, num_bits: int, method: str = "quantile", per_channel: bool = True):
    """Thresholds ``[C, K]`` (``per_channel``: statistics over all dims but 1) or ``[K]`` (over all of ``x``)
    from data ``x [B, C, *S]``, float64. ``method``: ``"uniform"`` on ``[min, max]``, or ``"quantile"`` (linear
    interpolation between order statistics; see the module docstring)."""
    num_bits = _check_num_bits(num_bits)
    if method not in FIT_METHODS:
        raise ValueError(f"method must be one of {list(FIT_METHODS)}, got {method!r}")
    _checks.floating_tensor(x, "x", min_dim=2)
    if x.numel() == 0:
        raise ValueError(f"x must hold data to fit thresholds, got shape {tuple(x.shape)}")
    data = x.detach().to(torch.float64)
    if not torch.isfinite(data).all():
        raise ValueError("x must be finite to fit thresholds")
    data = data.transpose(0, 1).reshape(x.shape[1], -1) if per_channel else data.reshape(1, -1)  # [G, n]
    if method == "uniform":
        t = uniform_thresholds(num_bits, data.amin(1), data.amax(1))
    else:
        srt = data.sort(dim=1).values
        n = srt.shape[1]
        pos = torch.arange(1, num_bits + 1, dtype=torch.float64, device=srt.device) * (n - 1) / (num_bits + 1)
        lo = pos.floor().long()
        hi = (lo + 1).clamp(max=n - 1)
        w = pos - lo
        t = srt[:, lo] + (srt[:, hi] - srt[:, lo]) * w  # non-decreasing: srt is sorted and pos increases
    t = t.cpu()
    return t if per_channel else t[0]


def _place(thresholds: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Thresholds ``[K]`` / ``[C, K]`` viewed as ``[1, 1 or C, K, 1, ...]`` against ``x.unsqueeze(2)``."""
    c = thresholds.shape[0] if thresholds.dim() == 2 else 1
    return thresholds.reshape(1, c, thresholds.shape[-1], *([1] * (x.dim() - 2)))


def _merge(bits: torch.Tensor, layout: str) -> torch.Tensor:
    """``[B, C, K, *S]`` -> ``[B, C K, *S]`` in ``layout``."""
    if layout == "threshold_major":
        bits = bits.transpose(1, 2)
    return bits.reshape(bits.shape[0], bits.shape[1] * bits.shape[2], *bits.shape[3:])


class _ThermometerBase(torch.nn.Module):
    def _setup(self, num_bits, thresholds, low, high, channels, layout, ordered: bool) -> torch.Tensor:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
        self.layout = layout
        if thresholds is None:
            if num_bits is None:
                raise ValueError("give num_bits (uniform thresholds on [low, high]) or thresholds")
            num_bits = _check_num_bits(num_bits)
            for name, v in (("low", low), ("high", high)):
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not abs(v) < float("inf"):
                    raise ValueError(f"{name} must be a finite number, got {v!r}")
            if not low < high:
                raise ValueError(f"low must be < high, got low={low!r}, high={high!r}")
            t = uniform_thresholds(num_bits, float(low), float(high))
            if channels is not None:
                if isinstance(channels, bool) or not isinstance(channels, numbers.Integral) or channels < 1:
                    raise ValueError(f"channels must be an integer >= 1 or None, got {channels!r}")
                t = t.expand(int(channels), num_bits).clone()
        else:
            if channels is not None:
                raise ValueError("channels goes with num_bits; given thresholds carry their own shape")
            t = _check_thresholds(
                thresholds, "thresholds", None if num_bits is None else _check_num_bits(num_bits), ordered
            )
        self.num_bits = int(t.shape[-1])
        return t

    @property
    def per_channel(self) -> bool:
        return self.thresholds.dim() == 2

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # A fitted layer's thresholds may be [C, K] where a fresh one has [K]: take the stored shape (checked).
        t = state_dict.get(prefix + "thresholds")
        if isinstance(t, torch.Tensor) and t.shape != self.thresholds.shape:
            checked = _check_thresholds(t, f"load_state_dict: {prefix}thresholds", self.num_bits, False)
            self._replace_thresholds(checked)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        shape = "x".join(map(str, self.thresholds.shape))
        return f"num_bits={self.num_bits}, thresholds={shape}, layout={self.layout}"


class Thermometer(_ThermometerBase):
    """Thermometer encoding with fixed thresholds: ``[B, C, *S] -> [B, C K, *S]`` Boolean values (0.0 / 1.0 in
    the input's dtype), bit ``k`` of channel ``c`` being ``x[:, c] > t[c, k]`` (strict). Layouts, threshold
    conventions and ``fit`` methods: see the module docstring. The same in training and eval mode; no gradient
    reaches ``x`` (a step function; use :class:`LearnableThermometer` for a relaxed encoding).

    Args:
        num_bits: ``K``, thresholds per channel; without ``thresholds``: uniform on ``[low, high]``.
        thresholds: ``[K]`` or ``[C, K]`` values, finite and non-decreasing along K (instead of num_bits).
        low, high: range of the uniform thresholds (default ``[0, 1]``: images from ``ToTensor``).
        channels: with ``num_bits``: ``[C, K]`` thresholds (the same uniform set for each channel) instead of ``[K]``.
        layout: ``"channel_major"`` (default) or ``"threshold_major"``.
        dtype: of the ``thresholds`` buffer (default: torch's default dtype). Comparisons follow torch's type
            promotion, so float32 thresholds against float32 inputs compare as ``x > 0.25`` does in difflogic.

    ``fit(x, method="quantile", per_channel=True)`` replaces the thresholds by data statistics and returns the
    module. The buffer ``thresholds`` round-trips through ``state_dict`` (``[K]`` or ``[C, K]``, either loads).
    NaN inputs give 0 bits (every comparison is False); +-inf give all ones / zeros.
    """

    def __init__(
        self,
        num_bits: int | None = None,
        thresholds=None,
        low: float = 0.0,
        high: float = 1.0,
        channels: int | None = None,
        layout: str = "channel_major",
        dtype=None,
    ):
        super().__init__()
        t = self._setup(num_bits, thresholds, low, high, channels, layout, ordered=True)
        self.register_buffer("thresholds", t.to(dtype or torch.get_default_dtype()))

    def _replace_thresholds(self, t: torch.Tensor) -> None:
        self.thresholds = t.to(self.thresholds.device, self.thresholds.dtype)

    @torch.no_grad()
    def fit(self, x: torch.Tensor, method: str = "quantile", per_channel: bool = True) -> Thermometer:
        """Sets the thresholds from data ``x [B, C, *S]`` (see ``fit_thresholds``); returns ``self``."""
        self._replace_thresholds(fit_thresholds(x, self.num_bits, method, per_channel))
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.thresholds)
        bits = x.detach().unsqueeze(2) > _place(self.thresholds, x)
        return _merge(bits.to(x.dtype), self.layout)


class LearnableThermometer(_ThermometerBase):
    """Thermometer encoding with learned thresholds (a ``torch.nn.Parameter`` ``thresholds``, ``[K]`` or ``[C, K]``).

    Eval mode: the hard code ``x > t`` (strict), exactly as :class:`Thermometer` with the current thresholds.
    Training mode, with ``z = (x - t) / temperature``:

    * ``relaxation="sigmoid"`` (default): the output is ``sigmoid(z)``, a smooth bit in ``(0, 1)`` that tends to
      the hard code as ``temperature -> 0``; gradients are exact for this relaxed form. torchlogix 0.2.2's
      ``LearnableBinarization`` defaults to the same ("soft" sampling, temperature 0.1).
    * ``relaxation="straight_through"``: the output is the hard code (so training sees eval's bits) and the
      backward uses the sigmoid's derivative, ``d out / d t = -sigmoid'(z) / temperature`` (torchlogix's "hard").

    The paper (Petersen et al. 2024) binarizes CIFAR-10 with fixed thresholds (3 or 31 uniform ones); learnable
    thresholds follow torchlogix. Differences from torchlogix: the parameters are the thresholds themselves (no
    ordering constraint: torchlogix keeps them increasing through softplus-positive differences; here two
    thresholds may cross during training, which only permutes which bit is which, every bit remaining a valid
    comparison), no built-in gradient-norm clipping hook and no Gumbel noise. Gradients reach ``x`` as well.

    Args:
        num_bits, thresholds, low, high, channels, layout: as :class:`Thermometer` (initial thresholds; given
            thresholds need not be ordered).
        temperature: ``> 0``, in the units of ``x``; compare it with the threshold spacing (``1 / (K + 1)`` for
            uniform thresholds on ``[0, 1]``). Default 0.1.
        relaxation: ``"sigmoid"`` or ``"straight_through"``.
        device, dtype: of the parameter (default: torch's default dtype). The output has ``x``'s dtype; the
            comparison and sigmoid are computed in the promoted dtype of ``x`` and the thresholds.

    ``fit(x, ...)`` re-initialises the thresholds from data (call it before building the optimizer: a change of
    shape, ``[K]`` to ``[C, K]``, makes a new Parameter). NaN inputs give NaN in training (relaxed values) and 0
    bits in eval mode.
    """

    def __init__(
        self,
        num_bits: int | None = None,
        thresholds=None,
        low: float = 0.0,
        high: float = 1.0,
        channels: int | None = None,
        temperature: float = 0.1,
        relaxation: str = "sigmoid",
        layout: str = "channel_major",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if relaxation not in RELAXATIONS:
            raise ValueError(f"relaxation must be one of {list(RELAXATIONS)}, got {relaxation!r}")
        self.temperature = _checks.positive_finite(temperature, "temperature")
        self.relaxation = relaxation
        t = self._setup(num_bits, thresholds, low, high, channels, layout, ordered=False)
        self.thresholds = torch.nn.Parameter(t.to(device=device, dtype=dtype or torch.get_default_dtype()))

    def _replace_thresholds(self, t: torch.Tensor) -> None:
        old = self.thresholds
        t = t.to(old.device, old.dtype)
        if t.shape == old.shape:
            old.data.copy_(t)
        else:
            self.thresholds = torch.nn.Parameter(t, requires_grad=old.requires_grad)

    @torch.no_grad()
    def fit(self, x: torch.Tensor, method: str = "quantile", per_channel: bool = True) -> LearnableThermometer:
        """Re-initialises the thresholds from data ``x [B, C, *S]`` (see ``fit_thresholds``); returns ``self``."""
        self._replace_thresholds(fit_thresholds(x, self.num_bits, method, per_channel))
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.thresholds)
        t = _place(self.thresholds, x)
        xu = x.unsqueeze(2)
        if not self.training:
            return _merge((xu.detach() > t.detach()).to(x.dtype), self.layout)
        soft = torch.sigmoid((xu - t) / self.temperature)
        if self.relaxation == "straight_through":
            hard = (xu.detach() > t.detach()).to(soft.dtype)
            soft = hard + (soft - soft.detach())  # value: exactly the hard bits; gradient: the sigmoid's
        return _merge(soft.to(x.dtype), self.layout)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, temperature={self.temperature}, relaxation={self.relaxation}"
