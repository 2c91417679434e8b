"""Differentiable logic gate networks: training layers and bit-packed inference (spec/logic.md)."""
