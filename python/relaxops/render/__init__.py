"""GenDR, the generalized differentiable mesh rasterizer (spec/rendering.md).

Built so far: the occlusion distributions and T-conorms (:mod:`relaxops.render.relaxations`).
"""
