"""Drop-in replacements for the original research packages, backed by relaxops' kernels.

Each submodule mirrors the public API of one package, so that switching is a one-line import change:

* ``relaxops.compat.diffsort`` — ``diffsort`` (Petersen et al., differentiable sorting networks):
  ``DiffSortNet``, ``sort``, ``bitonic_network``, ``odd_even_network``, ``get_sorting_network``, with the
  same signatures, attributes, network wiring (defects included, with a warning) and results (float64 to
  ~1e-12, float32 to ~1e-5), computed by relaxops' sorting-network kernels instead of dense matrix products.
  Modules ``functional``, ``networks``, ``diffsort``.

* ``relaxops.compat.difftopk`` — ``difftopk`` (differentiable top-k networks and the top-k classification
  loss): ``DiffTopkNet``, ``TopKCrossEntropyLoss``, ``NeuralSort``, ``SoftSort``, ``SmoothTopKLoss``,
  ``SmoothHardTopKLoss``, ``topk``, ``get_sorting_network``; ``sparse=True`` needs no torch-sparse. Modules
  ``difftopk``, ``functional``, ``networks``, ``losses``, ``neuralsort``, ``softsort``, ``smooth_topk``.

* ``relaxops.compat.difflogic`` — ``difflogic`` (differentiable logic gate networks): ``LogicLayer``,
  ``GroupSum``, ``PackBitsTensor``, ``CompiledLogicNet``, also on CPU. Modules ``difflogic``, ``functional``,
  ``packbitstensor``, ``compiled_model``.

* ``relaxops.compat.torchlogix`` — ``torchlogix`` 0.2.2's layers (``torchlogix.layers``): ``LogicDense``,
  ``LogicConv2d``, ``GroupSum``, ``OrPooling2d``, with its arguments, initial parameters and ``state_dict`` layout,
  as relaxops' logic modules (they train with our kernels, pack and export). One module.

* ``relaxops.compat.gendr`` — ``gendr`` (GenDR, the generalized differentiable renderer): ``GenDR``, ``Mesh``,
  ``LookAt``, ``Look``, ``Projection``, ``Transform``, the lighting modules, ``LaplacianLoss``, ``FlattenLoss`` and
  ``functional`` (``render``, ``load_obj``, ``save_obj``, ...), also on CPU.

* ``relaxops.compat.torchsort`` — ``torchsort`` 0.1.10 (fast soft sort and soft rank): ``soft_rank``, ``soft_sort``
  (2-D input as torchsort, integer tensors in the default float dtype; ``relaxops.soft_rank`` / ``soft_sort`` take
  any batch dimensions). Module ``ops``.

* ``relaxops.compat.algovision`` — ``algovision`` 0.1.2 (relaxed algorithms): ``Algorithm``, ``Input``, ``Output``,
  ``Var``, ``VarInt``, ``Let``, ``LetInt``, ``Print``, ``If``, ``While``, ``For``, the conditions and
  ``Min``/``ArgMin``/``Max``/``ArgMax``; programs are built once into a plan; hyper-parameters read at call time.
  Modules ``core``, ``conditions``, ``control_structures``, ``functions``, ``instructions``.

The original packages' modules exist under the same names, so the submodule imports users write keep working after
the switch (``from relaxops.compat.diffsort.functional import sort``); each has the public names of the original
module, and its docstring lists the names it leaves out, with the reason.

Where the original fails with an
``AssertionError`` or crashes, the compat module raises a ``ValueError``/``TypeError`` that says what is
wrong; where it raises ``NotImplementedError`` (unknown network type or distribution), the compat module
raises an exception that is both a ``NotImplementedError`` and a ``ValueError``, so existing ``except``
clauses keep working. Each submodule's docstring lists its deliberate differences from the original.

This package imports nothing itself; import the submodule you need.
"""
