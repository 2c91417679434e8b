"""Differentiable logic gate networks: training layers and bit-packed inference (docs/math/logic.md)."""

from .binarize import LearnableThermometer, Thermometer
from .bits import PackedBits, group_count, pack_bits, packed_layer, unpack_bits
from .functional import group_sum, logic_conv2d, logic_layer
from .gates import GATE_NAMES
from .lut import LogicLUTLayer, logic_lut
from .modules import GroupSum, LogicConv2d, LogicLayer, OrPooling2d, discretize
from .packed import PackedLogicNet
from .wiring import LearnableConnections

__all__ = [
    "LogicLayer",
    "GroupSum",
    "logic_layer",
    "group_sum",
    "discretize",
    "PackedBits",
    "PackedLogicNet",
    "pack_bits",
    "unpack_bits",
    "packed_layer",
    "group_count",
    "GATE_NAMES",
    "OrPooling2d",
    "Thermometer",
    "LearnableThermometer",
    "LogicConv2d",
    "logic_conv2d",
    "LearnableConnections",
    "LogicLUTLayer",
    "logic_lut",
]
