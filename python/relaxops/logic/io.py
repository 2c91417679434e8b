"""Saving and loading discretized logic gate networks in a compact binary format.

A trained network is fully described by its connections and one gate id per neuron (4 bits): the discretized
gates (``gate_ids()``), whatever the layer's parametrization, so light and walsh models are saved as the gates they
evaluate in eval mode and load back as softmax layers with those gates. Layout, all
little-endian:

    magic b"RLXLOGIC", version u8 (1, or 2 with offsets), num_layers u32, num_inputs u32, num_classes u32, tau f64,
    version 2 only: the group sum's offsets beta f64 [num_classes] (a regression head, docs/math/logic.md §12),
    per layer: out_dim u32, index bytes u8 (1, 2 or 4: the narrowest width holding in_dim - 1),
               a [out_dim], b [out_dim] (unsigned, that width), gate ids [ceil(out_dim / 2)] bytes
               (two ids a byte, the first in the low nibble).

A 6 x 8000-gate MNIST network takes 4 kB of gate ids and 64-96 kB of connections. (Training checkpoints use the
usual ``state_dict``: LogicLayer keeps its connections in buffers.)
"""

from __future__ import annotations

import struct

import numpy as np
import torch

_MAGIC = b"RLXLOGIC"
_VERSIONS = (1, 2)
_INDEX_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _index_bytes(n_in: int) -> int:
    return 1 if n_in <= 1 << 8 else (2 if n_in <= 1 << 16 else 4)


def save_gates(model, path) -> None:
    """Writes the discretized network of ``model`` (Flatten?, LogicLayer..., GroupSum) to ``path`` (a file name
    or a binary file object) in the compact format of this module."""
    from .modules import discretize

    num_inputs, layers, num_classes = discretize(model)
    head = list(model)[-1]
    tau = float(getattr(head, "tau", 1.0))
    beta = torch.as_tensor(getattr(head, "beta", 0.0)).detach().to("cpu", torch.float64).expand(num_classes)
    version = 2 if bool((beta != 0).any()) else 1  # files without offsets stay version 1
    out = [_MAGIC, struct.pack("<BIIId", version, len(layers), num_inputs, num_classes, tau)]
    if version == 2:
        out.append(beta.numpy().astype("<f8").tobytes())
    n_in = num_inputs
    for a, b, op in layers:
        n_out = a.numel()
        width = _index_bytes(n_in)
        ids = op.numpy().astype(np.uint8)
        ids = np.concatenate([ids, np.zeros(n_out % 2, np.uint8)])
        out += [
            struct.pack("<IB", n_out, width),
            a.numpy().astype(f"<u{width}").tobytes(),
            b.numpy().astype(f"<u{width}").tobytes(),
            (ids[0::2] | (ids[1::2] << 4)).tobytes(),
        ]
        n_in = n_out
    data = b"".join(out)
    if hasattr(path, "write"):
        path.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def load_gates(path, device=None, backend: str = "auto") -> torch.nn.Sequential:
    """Reads a network written by :func:`save_gates`: ``Sequential(Flatten, LogicLayer..., GroupSum)`` in eval
    mode whose logits are 1 for the stored gate and 0 elsewhere (so ``argmax`` gives the gate back); a version 2
    file's offsets become the GroupSum's ``beta`` (a float32 buffer ``[num_classes]``).

    A file that is not exactly such a network (bad magic or version, truncated, trailing bytes, an index width
    other than 1, 2 or 4, an index out of range, no layer, a class count not dividing the last layer, ...)
    raises ValueError."""
    from .modules import GroupSum, LogicLayer

    if hasattr(path, "read"):
        data = path.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    data = bytes(data)
    if data[: len(_MAGIC)] != _MAGIC:
        raise ValueError("path is not a relaxops logic network file (bad magic)")
    pos = len(_MAGIC)

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise ValueError(
                f"corrupt logic network file: truncated in {what} ({n} bytes needed at offset {pos}, "
                f"the file has {len(data)})"
            )
        pos += n
        return data[pos - n : pos]

    version, num_layers, num_inputs, num_classes, tau = struct.unpack("<BIIId", take(21, "the header"))
    if version not in _VERSIONS:
        raise ValueError(f"unsupported logic network file version {version}")
    beta = 0.0
    if version == 2:
        beta = torch.from_numpy(np.frombuffer(take(8 * num_classes, "the offsets"), "<f8").astype(np.float32))
    if num_layers < 1:
        raise ValueError("corrupt logic network file: no logic layer")
    modules: list[torch.nn.Module] = [torch.nn.Flatten()]
    n_in = num_inputs
    for i in range(num_layers):
        n_out, width = struct.unpack("<IB", take(5, f"layer {i}'s header"))
        if width not in _INDEX_DTYPES:
            raise ValueError(f"corrupt logic network file: layer {i} has index width {width}, not 1, 2 or 4")
        idx = [
            np.frombuffer(take(n_out * width, f"layer {i}'s connections"), f"<u{width}").astype(np.int64)
            for _ in range(2)
        ]
        packed_ids = np.frombuffer(take((n_out + 1) // 2, f"layer {i}'s gate ids"), np.uint8)
        ids = np.stack([packed_ids & 15, packed_ids >> 4], 1).reshape(-1)[:n_out].astype(np.int64)
        try:
            with torch.random.fork_rng(devices=[]):  # the weights' randn must not move the caller's generator
                layer = LogicLayer(n_in, n_out, (torch.from_numpy(idx[0]), torch.from_numpy(idx[1])), backend=backend)
        except ValueError as e:
            raise ValueError(f"corrupt logic network file: layer {i}: {e}") from e
        layer.weights = torch.nn.Parameter(torch.nn.functional.one_hot(torch.from_numpy(ids), 16).float())
        modules.append(layer.to(device))
        n_in = n_out
    if pos != len(data):
        raise ValueError(f"corrupt logic network file: {len(data) - pos} trailing bytes after the last layer")
    if num_classes < 1 or n_in % num_classes:
        raise ValueError(
            f"corrupt logic network file: {num_classes} classes do not divide the last layer's {n_in} outputs"
        )
    try:
        modules.append(GroupSum(num_classes, tau, beta, device=device))
    except ValueError as e:
        raise ValueError(f"corrupt logic network file: {e}") from e
    return torch.nn.Sequential(*modules).eval()
