"""Relaxed algorithms as programs (AlgoVision's framework, docs/math/algorithms.md §2), built once
into a plan.

A program is a tree of objects (``If``, ``While``, ``For``, ``Let`` ...) operating on a state: a dict from names to
batched tensors (leading batch dim ``B``) and hard Python ints / int lists. ``Algorithm`` compiles every node into
a closure when it is constructed: lambda signatures, argument kinds and index kinds are resolved once, so a call
runs a flat chain of closures with no inspection of the tree. The semantics are AlgoVision 0.1.2's, with these
deliberate differences (docs/math/algorithms.md §6):

* hyper-parameters (``beta``, ``max_iter``, ``epsilon``, ``hard``, ``debug``) of nodes that leave them ``None``
  are read from the calling ``Algorithm`` at call time: changing ``algorithm.beta`` takes effect, and a node reused
  in another ``Algorithm`` follows that one (AlgoVision writes them into the nodes once, at construction);
* ``c1 & c2`` and ``c1 | c2`` are conditions that take the algorithm's ``beta`` like any other;
* indices are tuples (never lists), a left-hand index may be a ``slice``; bad programs raise exceptions naming the
  offending part (``SyntaxError``, ``TypeError``, ``ValueError``, ``NameError``), not ``assert``;
* ``Eq``/``NEq``/``CatProbEq`` evaluate ``sech`` from exponentials of ``-|x|``: equal values, but finite gradients
  where ``cosh`` overflows;
* variables a branch or a loop leaves unchanged (the same tensor object) are not re-mixed (``p x + (1 - p) x``
  equals ``x`` up to rounding), and a ``Var``'s initial tensor is moved to the inputs' device.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import re
import types
from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import trace

_NAME = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")


def _check_name(name, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what}: name {name!r} is invalid: names match {_NAME.pattern}")
    return name


class _HP(NamedTuple):
    """The calling algorithm's hyper-parameters (read at call time by nodes that leave theirs ``None``)."""

    beta: float
    max_iter: int
    epsilon: float
    hard: bool
    debug: bool


# The decisions a call takes on tensor values (branch skips, loop continuation, checks) go through _decide while a
# traced plan (relaxops.algorithms.trace) captures the program: it records them (in trace.recorder) and checks them
# on replay. Eager calls that nothing records take the same decisions from extrema read into Python (_fast below).


def _decide(t: Tensor) -> bool:
    """``bool(t)`` of a one-element tensor, recorded when a capture is running."""
    if trace.recorder is None:
        return bool(t)
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():  # read the real value under the tracer
        value = bool(t)
    trace.recorder.append((t, value))
    return value


# Eager calls that no capture records take the same decisions from a tensor's extrema read with one host sync: a
# comparison ``x > eps`` of a tensor with a Python float rounds ``eps`` to the tensor's dtype, so for the extrema
# (representable in that dtype) it is the Python comparison with the rounded ``eps``. NaN extrema (NaN entries, which
# ``p > eps`` reads as False but the extrema propagate) and ambiguous roundings fall back to the exact tests.
_FAST_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def _round_to(eps: float, dtype) -> float:
    """``eps`` rounded to ``dtype``, as a comparison of a tensor of that dtype with ``eps`` rounds it."""
    return torch.tensor(eps, dtype=dtype).item()


def _fast(t: Tensor) -> bool:
    """Whether decisions on ``t`` may be read from its extrema (no capture recording, a float dtype, not empty)."""
    return trace.recorder is None and t.dtype in _FAST_DTYPES and t.numel() > 0


def _extrema(t: Tensor) -> tuple:
    """``(min, max)`` of ``t`` as Python floats (one reduction, no autograd node)."""
    mn, mx = torch.aminmax(t.detach())
    if t.device.type == "cpu":
        return mn.item(), mx.item()  # two reads cost less than a stack
    mn, mx = torch.stack((mn, mx)).tolist()  # one device-to-host copy
    return mn, mx


def _one_minus_above(mn: float, eps_r: float):
    """``1 - mn > eps_r`` with ``1 - mn`` rounded to ``mn``'s dtype, or None where the rounding could decide."""
    if 0.5 <= mn <= 2.0:
        return 1.0 - mn > eps_r  # exact in any binary float format (Sterbenz)
    if mn < 0.5 and eps_r < 0.5:
        return True  # 1 - mn > 0.5, rounded to >= 0.5
    if mn > 2.0 and eps_r >= -1.0:
        return False  # 1 - mn < -1, rounded to <= -1
    return None  # NaN, or eps outside [-1, 0.5) and mn outside [0.5, 2]


def _missing(name: str, state: dict) -> NameError:
    return NameError(f"variable {name!r} is not defined; defined are {sorted(state)}")


class _Lambda:
    """A user function called with the state's values of its parameter names (resolved once)."""

    __slots__ = ("fn", "names")

    def __init__(self, fn):
        self.fn = fn
        self.names = tuple(inspect.getfullargspec(fn).args)

    def __call__(self, state: dict):
        try:
            args = [state[k] for k in self.names]
        except KeyError as e:
            raise _missing(e.args[0], state) from None
        return self.fn(*args)


def _lookup(name: str):
    def get(state):
        try:
            return state[name]
        except KeyError:
            raise _missing(name, state) from None

    return get


def _getter(x):
    """state -> value for a variable name, a lambda over state names, or a constant."""
    if isinstance(x, str):
        return _lookup(x)
    if isinstance(x, types.FunctionType):
        return _Lambda(x)
    return lambda state: x


# --- conditions -------------------------------------------------------------------------------------------------


class Condition:
    """A relaxed condition: ``prob(state, hp)`` is the probability ``[B]`` (or ``[B, ...]``) that it holds.
    ``left``/``right`` are variable names, lambdas over variable names, or constants; ``beta=None`` takes the
    calling algorithm's."""

    def __init__(self, left, right=None, beta=None):
        self.left, self.right, self.beta = left, right, beta
        self._left, self._right = _getter(left), _getter(right)

    def _beta(self, hp: _HP) -> float:
        return hp.beta if self.beta is None else self.beta

    def prob(self, state: dict, hp: _HP) -> Tensor:  # abstract: every subclass defines it
        raise NotImplementedError(f"{type(self).__name__} does not define prob()")

    def __and__(self, other: Condition) -> Condition:
        return And(self, other)

    def __or__(self, other: Condition) -> Condition:
        return Or(self, other)


def _sech(x: Tensor) -> Tensor:
    """1 / cosh(x) without overflow: 2 e^-|x| / (1 + e^-2|x|)."""
    e = torch.exp(-x.abs())
    return 2 * e / (1 + e * e)


class LT(Condition):
    """``P[left < right] = sigmoid(beta (right - left))``; ``LEq`` is the same (ties carry probability 1/2)."""

    def prob(self, state, hp):
        return torch.sigmoid((self._right(state) - self._left(state)) * self._beta(hp))  # = -((l - r) beta) exactly


class GT(Condition):
    """``P[left > right] = sigmoid(beta (left - right))``; ``GEq`` is the same."""

    def prob(self, state, hp):
        return torch.sigmoid((self._left(state) - self._right(state)) * self._beta(hp))


LEq = LT
GEq = GT


class Eq(Condition):
    """``P[left = right] = sech^2(beta (left - right) / 2)`` (1 at equality, symmetric, decaying to 0)."""

    def prob(self, state, hp):
        return _sech((self._left(state) - self._right(state)) * self._beta(hp) / 2.0) ** 2


class NEq(Condition):
    """``1 - Eq``."""

    def prob(self, state, hp):
        return 1 - _sech((self._left(state) - self._right(state)) * self._beta(hp) / 2.0) ** 2


class CosineSimilarity(Condition):
    """``cos(left, right)`` along the last dim (torch's ``cosine_similarity``, eps 1e-8); no beta."""

    def prob(self, state, hp):
        return torch.nn.functional.cosine_similarity(self._left(state), self._right(state), dim=-1)


class CatProbEq(Condition):
    """``sech(beta (1 - cos(left, right)))`` for categorical distributions along the last dim."""

    def prob(self, state, hp):
        cos = torch.nn.functional.cosine_similarity(self._left(state), self._right(state), dim=-1)
        return _sech((1.0 - cos) * self._beta(hp))


def _probability(value: Tensor, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{what}: the variable must be a tensor of probabilities, got {type(value).__name__}")
    if _fast(value):
        mn, mx = _extrema(value)
        bad = mn < 0 or mx > 1  # NaN extrema: False, as (value.min() < 0) | (value.max() > 1)
    else:
        bad = value.numel() and _decide((value.min() < 0) | (value.max() > 1))
    if bad:
        raise ValueError(
            f"{what}: the probability must lie in [0, 1], got values in [{value.min().item()}, {value.max().item()}]"
        )
    return value


class IsTrue(Condition):
    """The probability stored in a variable (checked to lie in [0, 1])."""

    def __init__(self, var):
        super().__init__(var)

    def prob(self, state, hp):
        return _probability(self._left(state), f"IsTrue({self.left!r})")


class IsFalse(Condition):
    """One minus the probability stored in a variable (checked to lie in [0, 1])."""

    def __init__(self, var):
        super().__init__(var)

    def prob(self, state, hp):
        return 1.0 - _probability(self._left(state), f"IsFalse({self.left!r})")


class And(Condition):
    """Both conditions (independent events): ``p q``."""

    def __init__(self, a: Condition, b: Condition):
        for c in (a, b):
            if not isinstance(c, Condition):
                raise TypeError(f"&: operands must be conditions, got {type(c).__name__}")
        super().__init__(a, b)

    def prob(self, state, hp):
        return self.left.prob(state, hp) * self.right.prob(state, hp)


class Or(And):
    """Either condition (probabilistic sum): ``p + q - p q``."""

    def prob(self, state, hp):
        p, q = self.left.prob(state, hp), self.right.prob(state, hp)
        return p + q - p * q


# --- soft min / max ---------------------------------------------------------------------------------------------


class _Soft(torch.nn.Module):
    def __init__(self, beta):
        super().__init__()
        if beta is None or isinstance(beta, bool) or not isinstance(beta, (int, float)):
            raise TypeError(
                f"{type(self).__name__}: beta must be given as a number (it is not taken from the "
                f"algorithm), got {beta!r}"
            )
        self.beta = beta

    def weights(self, x: Tensor) -> Tensor:  # abstract: every subclass defines it
        raise NotImplementedError(f"{type(self).__name__} does not define weights()")

    def forward(self, *tensors: Tensor) -> Tensor:
        x = torch.stack(tensors, -1)
        return (self.weights(x) * x).sum(-1)


class Min(_Soft):
    """``sum softmin(beta X) X`` over the arguments (stacked along a new last dim)."""

    def weights(self, x):
        return torch.softmax(-self.beta * x, -1)


class Max(_Soft):
    """``sum softmax(beta X) X`` over the arguments."""

    def weights(self, x):
        return torch.softmax(self.beta * x, -1)


class ArgMin(Min):
    """``softmin(beta X)``: the relaxed one-hot argmin over the arguments (last dim)."""

    def forward(self, *tensors):
        return self.weights(torch.stack(tensors, -1))


class ArgMax(Max):
    """``softmax(beta X)``: the relaxed one-hot argmax over the arguments (last dim)."""

    def forward(self, *tensors):
        return self.weights(torch.stack(tensors, -1))


# --- declarations -----------------------------------------------------------------------------------------------


class Input:
    """An input of the algorithm, ``[B, *shape]``; ``shape`` (without the batch dim) and ``dtype`` are checked
    when given."""

    def __init__(self, name, shape=None, dtype=None):
        self.name = _check_name(name, "Input")
        self.shape = None if shape is None else tuple(shape)
        self.dtype = dtype

    def check(self, x, what: str):
        if not isinstance(x, Tensor):
            raise TypeError(f"{what} {self.name!r} must be a tensor, got {type(x).__name__}")
        if self.shape is not None and tuple(x.shape[1:]) != self.shape:
            raise ValueError(
                f"{what} {self.name!r} must have shape [B, {', '.join(map(str, self.shape))}], got {list(x.shape)}"
            )
        if self.dtype is not None and x.dtype != self.dtype:
            raise TypeError(f"{what} {self.name!r} must have dtype {self.dtype}, got {x.dtype}")


class Output(Input):
    """An output: a variable or input returned (in declaration order) by the algorithm (``shape`` and ``dtype``
    are checked when given)."""

    def check(self, x, what: str):
        if self.shape is not None or self.dtype is not None:
            super().check(x, what)


class Variable:
    """A differentiable variable: a tensor (copied) or a lambda over inputs / earlier variables returning one,
    repeated over the batch (``[*shape] -> [B, *shape]``)."""

    def __init__(self, name, initial_value):
        self.name = _check_name(name, "Var")
        if isinstance(initial_value, Tensor):
            initial_value = initial_value.detach().clone()
        elif not isinstance(initial_value, types.FunctionType):
            raise TypeError(
                f"Var {name!r}: initial_value must be a tensor or a lambda, got {type(initial_value).__name__}"
            )
        self.initial_value = initial_value
        self._init = _getter(initial_value)


def _int_value(value, what: str):
    """An int or a list of ints (any iterable of ints is listed)."""
    if isinstance(value, bool) or not isinstance(value, (int, collections.abc.Iterable)) or isinstance(value, str):
        raise TypeError(f"{what} must be an int or a list of ints, got {value!r}")
    if isinstance(value, int):
        return value
    value = list(value)
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what} must be an int or a list of ints, got the element {v!r}")
    return value


class VariableInt:
    """A hard integer variable (no batch dim, no gradient): an int, a list of ints, or a lambda returning one."""

    def __init__(self, name, initial_value):
        self.name = _check_name(name, "VarInt")
        if not isinstance(initial_value, types.FunctionType):
            initial_value = _int_value(initial_value, f"VarInt {name!r}")
        self.initial_value = initial_value
        self._init = _getter(initial_value)


Var = Variable
VarInt = VariableInt


# --- instructions -----------------------------------------------------------------------------------------------


class Instruction:
    """A node of the program. ``compile()`` returns the closure ``run(state, hp) -> state`` (state is a dict the
    closure may update in place; ``If`` copies it for its second branch)."""

    def compile(self):  # abstract: every subclass defines it
        raise NotImplementedError(f"{type(self).__name__} does not define compile()")


def _compile_body(body, what: str):
    if body is None:
        return None
    if isinstance(body, Instruction):
        body = [body]
    if not isinstance(body, (list, tuple)):
        raise TypeError(f"{what}: expected an instruction or a list of instructions, got {type(body).__name__}")
    for b in body:
        if not isinstance(b, Instruction):
            raise SyntaxError(f"{what}: {b!r} is not an instruction (Let, LetInt, Print, If, While, For)")
    runs = tuple(b.compile() for b in body)
    if len(runs) == 1:
        return runs[0]

    def run_all(state, hp):
        for r in runs:
            state = r(state, hp)
        return state

    return run_all


def _assign(state: dict, name: str, value):
    """``name = value``: tensors keep their shape (``value`` broadcasts to it: ``value * ones_like(old)``), hard
    variables keep their type."""
    try:
        old = state[name]
    except KeyError:
        raise _missing(name, state) from None
    if isinstance(old, Tensor):
        if isinstance(value, Tensor):
            if value.shape != old.shape:
                raise ValueError(
                    f"Let {name!r}: a tensor value must have the variable's shape {list(old.shape)} "
                    f"(shapes never change), got {list(value.shape)}"
                )
            state[name] = value if value.dtype == old.dtype else value * torch.ones_like(old)
        elif isinstance(value, (int, float)):
            state[name] = torch.full_like(old, value)
        else:
            raise TypeError(f"Let {name!r}: the value must be a tensor, int or float, got {type(value).__name__}")
    else:
        if not isinstance(value, type(old)):
            raise TypeError(
                f"Let {name!r}: the hard variable holds a {type(old).__name__}, got "
                f"{type(value).__name__} (use LetInt for integer variables)"
            )
        state[name] = value


def _hard_index(ix, what: str, allow_tensor: bool):
    """state -> index for an int, slice, None (':'), variable name or lambda (tensors only on the left side)."""
    if isinstance(ix, bool):
        raise TypeError(f"{what}: invalid index {ix!r}")
    if isinstance(ix, (int, slice)):
        return lambda state: ix
    if ix is None:
        return lambda state: slice(None)
    if isinstance(ix, Tensor):
        if not allow_tensor:
            raise TypeError(f"{what}: a tensor cannot index the value side; write relaxed reads in a lambda")
        return lambda state: ix
    if isinstance(ix, (str, types.FunctionType)):
        get = _getter(ix)

        def resolve(state):
            v = get(state)
            if isinstance(v, bool) or not (isinstance(v, int) or (allow_tensor and isinstance(v, Tensor))):
                raise TypeError(
                    f"{what}: the index {ix!r} must give an int"
                    + (" or a tensor of weights" if allow_tensor else "")
                    + f", got {type(v).__name__}"
                )
            return v

        return resolve
    raise TypeError(f"{what}: invalid index {ix!r} of type {type(ix).__name__}")


class Let(Instruction):
    """Assignment (docs/math/algorithms.md §2.5): ``Let('a', value)``, ``Let('a', 'arr', [i, ...])``
    (``a = arr[i, ...]``), ``Let('arr', [i, ...], value)`` (``arr[i, ...] = value``),
    ``Let('arr', [i, ...], 'x', [j, ...])`` and ``Let(['a', 'b'], lambda ...: (u, v))``. Values: a variable name, a
    lambda over variable names, an int or float, or a tensor (repeated over the batch). Indices: ints, slices, ``None``
    (``:``), names of hard variables, lambdas returning ints; a left-hand index may instead be one tensor of weights
    ``w`` (a relaxed write ``arr = w value + (1 - w) arr``). The batch dim is implicit in every index."""

    def __init__(self, *args):
        self.target, self.target_index, self.value, self.value_index = None, None, None, None
        if len(args) == 2 and isinstance(args[0], list):
            if not all(isinstance(a, str) for a in args[0]) or not isinstance(args[1], types.FunctionType):
                raise SyntaxError(
                    f"Let([names], value): a list of names takes a lambda returning one value each, got {args!r}"
                )
            self.target, self.value = [_check_name(a, "Let") for a in args[0]], args[1]
        elif len(args) == 2 and isinstance(args[0], str):
            self.target, self.value = args
        elif len(args) == 3 and isinstance(args[0], str) and isinstance(args[1], list):
            self.target, self.target_index, self.value = args
        elif len(args) == 3 and isinstance(args[0], str) and isinstance(args[1], str) and isinstance(args[2], list):
            self.target, self.value, self.value_index = args
        elif (
            len(args) == 4
            and isinstance(args[0], str)
            and isinstance(args[1], list)
            and isinstance(args[2], str)
            and isinstance(args[3], list)
        ):
            self.target, self.target_index, self.value, self.value_index = args
        else:
            raise SyntaxError(f"Let: invalid arguments {args!r} (see help(Let) for the forms)")
        if not isinstance(self.value, (str, types.FunctionType, int, float, Tensor)) or isinstance(self.value, bool):
            raise TypeError(
                f"Let {self.target!r}: the value must be a name, lambda, int, float or tensor, got "
                f"{type(self.value).__name__}"
            )
        if isinstance(self.value, Tensor):
            self.value = self.value.detach().clone()

    def compile(self):
        what = f"Let {self.target!r}"
        value = self.value
        if isinstance(value, Tensor):

            def get(state, t=value):
                B = state["__batch__"]
                return t.to(state["__device__"]).unsqueeze(0).expand(B, *t.shape)
        else:
            get = _getter(value)

        if isinstance(self.target, list):
            names = self.target

            def run_multi(state, hp):
                results = get(state)
                if not isinstance(results, (tuple, list)) or len(results) != len(names):
                    raise ValueError(f"{what}: the lambda must return {len(names)} values, got {results!r:.80}")
                for n, r in zip(names, results):
                    _assign(state, n, r)
                return state

            return run_multi

        if self.value_index:
            if not isinstance(value, (str, types.FunctionType)):
                raise SyntaxError(f"{what}: only a variable can be indexed on the value side")
            vix = tuple(_hard_index(i, what, allow_tensor=False) for i in self.value_index)
            plain_get = get

            def get(state):
                v = plain_get(state)
                if not isinstance(v, Tensor):
                    raise TypeError(f"{what}: only tensors can be indexed, got {type(v).__name__}")
                if len(vix) > v.dim() - 1:
                    raise IndexError(
                        f"{what}: {len(vix)} indices for a value of shape {list(v.shape)} (the batch dim is implicit)"
                    )
                idx = tuple(i(state) for i in vix)
                if len(idx) == 1 and isinstance(idx[0], int):
                    return v.select(1, idx[0])  # v[:, i] as one view op
                return v[(slice(None),) + idx]

        name = self.target
        if not self.target_index:

            def run_assign(state, hp):
                v = get(state)
                if isinstance(v, (tuple, list)):
                    raise ValueError(f"{what}: a lambda returning several values needs a list of names")
                _assign(state, name, v)
                return state

            return run_assign

        tix = tuple(_hard_index(i, what, allow_tensor=True) for i in self.target_index)

        def run_write(state, hp):
            arr = state.get(name)
            if not isinstance(arr, Tensor):
                raise TypeError(f"{what}: only tensor variables can be written at an index, got {type(arr).__name__}")
            idx = tuple(i(state) for i in tix)
            v = get(state)
            if (
                isinstance(v, Tensor)
                and v.dim() == 1
                and len(idx) == arr.dim() - 1
                and v.shape[0] == arr.shape[0]
                and all(isinstance(i, int) for i in idx)
            ):
                # arr[:, i, j, ...] = v [B] (every dim indexed): one select_scatter on arr with those dims flattened
                flat = 0
                for d, i in enumerate(idx, 1):
                    size = arr.shape[d]
                    if not -size <= i < size:
                        raise IndexError(f"{what}: index {i} is out of range for dim {d} of size {size}")
                    flat = flat * size + (i + size if i < 0 else i)
                if v.dtype != arr.dtype:
                    dtype = torch.result_type(arr, v)  # as w v + (1 - w) arr would
                    arr, v = arr.to(dtype), v.to(dtype)
                if arr.dim() == 2:
                    state[name] = torch.select_scatter(arr, v, 1, flat)
                else:
                    state[name] = torch.select_scatter(arr.flatten(1), v, 1, flat).reshape(arr.shape)
                return state
            if isinstance(v, Tensor):
                v = v.reshape(v.shape + (1,) * (arr.dim() - v.dim()))  # unsqueezed at the end, broadcast
            if any(isinstance(i, Tensor) for i in idx):  # relaxed write with weights w: w v + (1 - w) arr
                if len(idx) != 1:
                    raise IndexError(f"{what}: a relaxed (tensor) index must be the only index")
                w = idx[0]
                if w.dim() == arr.dim() - 1:  # a literal tensor of weights: repeated over the batch
                    w = w.to(arr.device).unsqueeze(0)
                state[name] = w * v + (1 - w) * arr
                return state
            if len(idx) > arr.dim() - 1:
                raise IndexError(
                    f"{what}: {len(idx)} indices for a variable of shape {list(arr.shape)} (the batch dim is implicit)"
                )
            key = (slice(None),) + idx
            dtype = torch.result_type(arr, v) if isinstance(v, Tensor) else arr.dtype  # as w v + (1 - w) arr would
            new = arr.to(dtype, copy=True)
            if isinstance(v, Tensor):
                new[key] = torch.broadcast_to(v, arr.shape)[key]
            else:
                new[key] = v
            state[name] = new
            return state

        return run_write


class LetInt(Instruction):
    """Assignment of a hard integer variable: an int, a list of ints, a variable name or a lambda."""

    def __init__(self, name, value):
        self.name = _check_name(name, "LetInt")
        if not isinstance(value, (str, types.FunctionType)):
            value = _int_value(value, f"LetInt {name!r}")
        self.value = value

    def compile(self):
        get, name, what = _getter(self.value), self.name, f"LetInt {self.name!r}"

        def run(state, hp):
            v = _int_value(get(state), what)
            if name not in state:
                raise _missing(name, state)
            if isinstance(state[name], Tensor):
                raise TypeError(f"{what}: {name!r} is a tensor variable (use Let)")
            state[name] = list(v) if isinstance(v, list) else v
            return state

        return run


class Print(Instruction):
    """Prints ``function(state values)`` (for debugging); the state is unchanged."""

    def __init__(self, function):
        if not isinstance(function, types.FunctionType):
            raise TypeError(f"Print: function must be a lambda, got {type(function).__name__}")
        self.function = function

    def compile(self):
        fn = _Lambda(self.function)

        def run(state, hp):
            if trace.tracing:
                raise trace.Untraceable("Print cannot be replayed")
            print(fn(state))
            return state

        return run


def _is_hard(v) -> bool:
    return not isinstance(v, Tensor) or not (v.is_floating_point() or v.is_complex())


def _expand_weight(w: Tensor, v: Tensor, what: str) -> Tensor:
    if w.dim() == v.dim():
        return w
    if w.dim() > v.dim():
        raise ValueError(
            f"{what}: the condition's probability has shape {list(w.shape)}, more dims than the "
            f"variable of shape {list(v.shape)} it mixes (conditions usually give [B])"
        )
    return w.reshape(w.shape + (1,) * (v.dim() - w.dim()))


def _mix(t: Tensor, f: Tensor, q: Tensor) -> Tensor:
    """``q t + (1 - q) f`` (one lerp where the dtypes agree)."""
    if t.dtype == f.dtype == q.dtype and t.shape == f.shape:
        return torch.lerp(f, t, q)
    return t * q + f * (1 - q)


def _branch_tests(p: Tensor, eps: float, need_true: bool, need_false: bool) -> tuple:
    """``((p > eps).any(), (1 - p > eps).any())`` (False where the branch is absent), with one host sync."""
    if (need_true or need_false) and _fast(p):
        eps_r = _round_to(eps, p.dtype)
        if need_true and need_false:
            mn, mx = _extrema(p)
        elif need_true:
            mn, mx = 1.0, p.detach().max().item()
        else:
            mn, mx = p.detach().min().item(), 0.0
        if mx == mx:  # not NaN
            take_false = need_false and _one_minus_above(mn, eps_r)
            if take_false is not None:
                return need_true and mx > eps_r, take_false
    return (need_true and _decide((p > eps).any()), need_false and _decide((1 - p > eps).any()))


class If(Instruction):
    """``p f(state) + (1 - p) g(state)`` for every variable (docs/math/algorithms.md §1.7, §2.7), ``p`` the condition's
    probability. A branch runs only if its probability exceeds ``epsilon`` for some element of the batch (else it
    contributes the unmodified state); ``hard=True`` mixes with ``p > 0.5``. Hard variables must agree between the
    branches."""

    def __init__(self, condition, if_true=None, if_false=None, epsilon=None, hard=None, debug=None):
        if not isinstance(condition, Condition):
            raise TypeError(f"If: condition must be a Condition (LT, GT, Eq, ...), got {type(condition).__name__}")
        self.condition, self.if_true, self.if_false = condition, if_true, if_false
        self.epsilon, self.hard, self.debug = epsilon, hard, debug
        self.beta, self.max_iter = None, None

    def compile(self):
        cond = self.condition
        run_true = _compile_body(self.if_true, "If(if_true)")
        run_false = _compile_body(self.if_false, "If(if_false)")

        def run(state, hp):
            p = cond.prob(state, hp)
            B = state["__batch__"]
            if not isinstance(p, Tensor) or p.dim() < 1 or p.shape[0] != B:
                raise ValueError(
                    f"If: the condition must give a probability of shape [B={B}, ...], got "
                    f"{list(p.shape) if isinstance(p, Tensor) else type(p).__name__}"
                )
            eps = hp.epsilon if self.epsilon is None else self.epsilon
            hard = hp.hard if self.hard is None else self.hard
            if hp.debug if self.debug is None else self.debug:
                print("If", p)
            s_true, s_false = state, dict(state)
            take_true, take_false = _branch_tests(p, eps, run_true is not None, run_false is not None)
            if take_true:
                s_true = run_true(s_true, hp)
            if take_false:
                s_false = run_false(s_false, hp)
            q = (p > 0.5).to(p.dtype) if hard else p  # weight of the true branch
            expanded = {}  # q with trailing unit dims, per rank
            keys, ts, fs, qs = [], [], [], []  # the variables that differ, mixed by one foreach lerp
            for k, t in s_true.items():
                f = s_false[k]
                if t is f:
                    continue
                if _is_hard(t) or _is_hard(f):
                    if isinstance(t, Tensor) and isinstance(f, Tensor):  # torch.equal, as a recorded decision
                        same = (
                            t.shape == f.shape
                            and t.dtype == f.dtype
                            and t.device == f.device
                            and _decide((t == f).all())
                        )
                    else:
                        same = not isinstance(t, Tensor) and not isinstance(f, Tensor) and t == f
                    if not same:
                        raise ValueError(
                            f"If: the hard variable {k!r} was modified differently in the two branches "
                            "(hard values cannot be relaxed)"
                        )
                    continue
                if t.dim() not in expanded:
                    expanded[t.dim()] = _expand_weight(q, t, "If")
                if t.dtype == f.dtype == q.dtype and t.shape == f.shape and t.device == f.device:
                    keys.append(k), ts.append(t), fs.append(f), qs.append(expanded[t.dim()])
                else:
                    s_true[k] = _mix(t, f, expanded[t.dim()])
            if keys:
                for k, v in zip(keys, torch._foreach_lerp(fs, ts, qs)):  # q t + (1 - q) f
                    s_true[k] = v
            return s_true

        return run


class While(Instruction):
    """The relaxed while loop (docs/math/algorithms.md §1.8, §2.7): ``sum_i P_i (1 - c_i) s_i + P s_last``, ``c_i`` the
    condition's probability in state ``s_i``; runs while the largest continuation probability in the batch exceeds
    ``epsilon`` and at most ``max_iter`` iterations; hard variables take the last state's values."""

    def __init__(self, condition, *sequence, max_iter=None, epsilon=None, hard=None, debug=None):
        if not isinstance(condition, Condition):
            raise TypeError(
                f"While: condition must be a Condition (LT, GT, IsTrue, ...), got {type(condition).__name__}"
            )
        self.condition, self.sequence = condition, sequence
        self.max_iter, self.epsilon, self.hard, self.debug = max_iter, epsilon, hard, debug
        self.beta = None

    def compile(self):
        cond, body = self.condition, _compile_body(list(self.sequence), "While")

        def run(state, hp):
            eps = hp.epsilon if self.epsilon is None else self.epsilon
            max_iter = hp.max_iter if self.max_iter is None else self.max_iter
            debug = hp.debug if self.debug is None else self.debug
            s0 = state
            P = cond.prob(s0, hp)
            acc: dict[str, Tensor] = {}  # mixtures of the variables that changed (the others stay s0's)
            state, i = dict(s0), 0
            while i < max_iter and (
                P.detach().max().item() > _round_to(eps, P.dtype) if _fast(P) else _decide(P.max() > eps)
            ):  # NaN max: False either way
                if body is not None:
                    state = body(state, hp)
                P_new = P * cond.prob(state, hp)
                w = P - P_new
                for k, v in state.items():
                    if k in acc:
                        acc[k] = torch.addcmul(acc[k], _expand_weight(w, v, "While"), v)
                    elif v is not s0.get(k) and not _is_hard(v):  # first change: the weights so far sum to 1 - P
                        acc[k] = torch.addcmul(
                            (1 - _expand_weight(P, v, "While")) * s0[k], _expand_weight(w, v, "While"), v
                        )
                if debug:
                    print("While", i, w)
                P, i = P_new, i + 1
            out = dict(state)
            for k, v in state.items():
                if k in acc:
                    out[k] = torch.addcmul(acc[k], _expand_weight(P, v, "While"), v)
                elif not _is_hard(v):
                    out[k] = s0[k]
            return out

        return run


class For(Instruction):
    """An unrolled loop: ``var`` takes each value of ``range_or_list`` (an int n for 0..n-1, a list or iterable
    of ints, the name of a hard variable, or a lambda; evaluated once, when the loop starts). ``var`` is a plain
    int in the state, must not exist before the loop and is removed after it."""

    def __init__(self, var, range_or_list, *sequence):
        self.var = _check_name(var, "For")
        if isinstance(range_or_list, collections.abc.Iterable) and not isinstance(range_or_list, str):
            range_or_list = _int_value(range_or_list, f"For {var!r}")
        elif not isinstance(range_or_list, (int, str, types.FunctionType)) or isinstance(range_or_list, bool):
            raise TypeError(
                f"For {var!r}: range_or_list must be an int, a list of ints, a name or a lambda, got {range_or_list!r}"
            )
        self.range_or_list, self.sequence = range_or_list, sequence

    def compile(self):
        get, var, what = _getter(self.range_or_list), self.var, f"For {self.var!r}"
        body = _compile_body(list(self.sequence), what)

        def run(state, hp):
            r = _int_value(get(state), what)
            if var in state:
                raise NameError(f"{what}: the loop variable must not exist in the enclosing scope")
            for i in range(r) if isinstance(r, int) else r:
                state[var] = i
                if body is not None:
                    state = body(state, hp)
            state.pop(var, None)
            return state

        return run


# --- the algorithm ----------------------------------------------------------------------------------------------


class Algorithm(torch.nn.Module):
    """A relaxed algorithm: ``Algorithm(*declarations_and_instructions, beta=10., max_iter=1024, epsilon=1e-5,
    hard=False, debug=False)``. Positional arguments are sorted by kind into inputs, outputs, variables, integer
    variables and instructions (run in order). ``forward(*inputs)`` returns the outputs in declaration order (a
    tensor if there is one). Hyper-parameters are read at call time by every node that leaves its own ``None``.

    ``compile``: ``None`` (default) runs the plan op by op. A ``torch.compile`` backend name (``"inductor"``) runs a
    traced plan instead (``relaxops.algorithms.trace``): the program's ops for the inputs' shapes and the decisions
    taken are captured once and compiled, forward and backward, into one unit; a call whose decisions differ runs
    the plan op by op (same result) and its pattern is captured in turn. It pays only for a program called many
    times with the same shapes: capture and compilation take tens of seconds to minutes (inductor, 2-core CPU:
    about 30 s for bubble sort n = 10, 4.5 min for n = 20), whereas a call takes milliseconds."""

    def __init__(self, *sequence, beta=10.0, max_iter=2**10, epsilon=1e-5, hard=False, debug=False, compile=None):
        super().__init__()
        if compile is not None and not isinstance(compile, str):
            raise TypeError(
                f"Algorithm: compile must be None or a torch.compile backend name such as 'inductor', got {compile!r}"
            )
        self.inputs, self.outputs, self.variables, self.variable_ints, self.instructions = [], [], [], [], []
        for elem in sequence:
            if isinstance(elem, Output):
                self.outputs.append(elem)
            elif isinstance(elem, Input):
                self.inputs.append(elem)
            elif isinstance(elem, Variable):
                self.variables.append(elem)
            elif isinstance(elem, VariableInt):
                self.variable_ints.append(elem)
            elif isinstance(elem, Instruction):
                self.instructions.append(elem)
            else:
                raise SyntaxError(f"Algorithm: {elem!r} is not an Input, Output, Var, VarInt or instruction")
        if not self.inputs or not self.outputs:
            raise SyntaxError("Algorithm: at least one Input and one Output are required")
        names = [d.name for d in self.inputs + self.variables + self.variable_ints]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SyntaxError(f"Algorithm: names declared twice: {dup}")
        self.beta, self.max_iter, self.epsilon, self.hard, self.debug = beta, max_iter, epsilon, hard, debug
        self._run = _compile_body(self.instructions, "Algorithm")
        self._traced = None
        if compile is not None:
            self._traced = trace.TracedPlans(self, compile)

    @property
    def algo_modules(self) -> tuple:
        """The instructions in order (AlgoVision's name). A tuple: the plan is built from them at construction."""
        return tuple(self.instructions)

    def hyperparameters(self) -> _HP:
        return _HP(self.beta, self.max_iter, self.epsilon, self.hard, self.debug)

    def forward(self, *inputs: Tensor) -> Any:
        self._check_inputs(inputs)
        hp = self.hyperparameters()
        if self._traced is None or hp.debug or trace.recorder is not None or torch.compiler.is_compiling():
            outs = self._forward_eager(inputs)
        else:
            outs = self._traced(inputs, hp)
        return outs[0] if len(outs) == 1 else outs

    def _check_inputs(self, inputs):
        if len(inputs) != len(self.inputs):
            raise TypeError(
                f"Algorithm: expected {len(self.inputs)} inputs ({[i.name for i in self.inputs]}), got {len(inputs)}"
            )
        for decl, x in zip(self.inputs, inputs):
            decl.check(x, "Input")
        B = inputs[0].shape[0] if inputs[0].dim() else None
        if B is None:
            raise ValueError(f"Input {self.inputs[0].name!r}: the first dim is the batch dim, got a scalar")
        for decl, x in zip(self.inputs, inputs):
            if x.dim() == 0 or x.shape[0] != B:
                raise ValueError(
                    f"Input {decl.name!r}: dim 0 is the batch dim (B = {B} from the first input), got "
                    f"shape {list(x.shape)}"
                )

    def _forward_eager(self, inputs) -> tuple:
        """The plan, run op by op: the tuple of outputs."""
        B, device = inputs[0].shape[0], inputs[0].device
        state: dict[str, Any] = {"__batch__": B, "__device__": device}
        state.update((d.name, x) for d, x in zip(self.inputs, inputs))
        for v in self.variables:
            t = v._init(state)
            if not isinstance(t, Tensor):
                raise TypeError(f"Var {v.name!r}: the initial value must be a tensor, got {type(t).__name__}")
            state[v.name] = t.to(device).unsqueeze(0).expand(B, *t.shape).clone()
        for v in self.variable_ints:
            state[v.name] = _int_value(v._init(state), f"VarInt {v.name!r}")
        hp = self.hyperparameters()
        if hp.debug:
            print("before", state)
        if self._run is not None:
            state = self._run(state, hp)
        if hp.debug:
            print("after", state)
        outs = []
        for decl in self.outputs:
            if decl.name not in state:
                raise _missing(decl.name, state)
            decl.check(state[decl.name], "Output")
            outs.append(state[decl.name])
        return tuple(outs)
