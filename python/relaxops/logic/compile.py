"""Export of a discretized logic gate network: standalone C (compiled into a shared library) and Verilog.

The C source (:func:`c_source`) has difflogic's interface: ``apply_logic_gate_net(const bool *inp, int32_t *out,
size_t len)`` takes ``len`` blocks of ``num_bits`` samples (row-major ``[len * num_bits, num_inputs]`` bools),
packs each block into words (sample ``j`` of a block at bit ``j``), evaluates one bitwise statement per gate of
the simplified netlist (:mod:`relaxops.logic.netlist`) and writes the per-class counts of ones
(``int32 [len * num_bits, num_classes]``) through a bit-sliced adder.
``logic_gate_net(const W *inp, W *out)`` evaluates the gates on one block of words. Unlike difflogic's
generator, words are unsigned (no undefined shifts), the statements are split into functions of
``STATEMENTS_PER_FUNCTION`` (compile time stays about linear in the gate count), one-layer networks work, and the
class count must divide the last layer. Convolutional networks (``LogicConv2d``, ``OrPooling2d``; pass
``input_shape=(C, H, W)``) are exported through their lowered netlist (:mod:`relaxops.logic.lower`): the inputs are
an image's ``C H W`` bits in channel-major order (feature ``c H W + y W + x``).

:class:`CompiledLogicNet` compiles that source with the system C compiler and runs it through ``ctypes``, with
difflogic's signature; :func:`verilog_source` emits a combinational Verilog module of the same network.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np
import torch

from . import netlist

WORD_TYPES = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}
STATEMENTS_PER_FUNCTION = 512
# Bitwise form of each gate (docs/math/logic.md §1.1), {a} and {b} the operands; ONES is the all-ones word.
GATE_EXPR = (
    "0", "{a} & {b}", "{a} & ~{b}", "{a}", "~{a} & {b}", "{b}", "{a} ^ {b}", "{a} | {b}",
    "~({a} | {b})", "~({a} ^ {b})", "~{b}", "{a} | ~{b}", "~{a}", "~{a} | {b}", "~({a} & {b})", "ONES",
)  # fmt: skip


def _program(model_or_program):
    """``(num_inputs, [(a, b, op), ...], num_classes)`` of a model or of such a tuple (validated, int64 arrays)."""
    if isinstance(model_or_program, tuple) and len(model_or_program) == 3:
        num_inputs, layers, num_classes = netlist.check_network(*model_or_program)
    else:
        from .modules import discretize

        num_inputs, layers, num_classes = discretize(model_or_program)
    return num_inputs, [tuple(t.numpy() for t in layer) for layer in layers], num_classes


def _planes(group: int) -> int:
    """Bits of a class count in 0..group."""
    return max(1, math.ceil(math.log2(group + 1)))


def _graph(model_or_program, input_shape):
    """The lowered network (``lower.Graph``) of a convolutional model, or of any model when ``input_shape`` is
    given; None for a dense model or a program tuple without ``input_shape``."""
    from . import lower

    if isinstance(model_or_program, tuple):
        if input_shape is not None:
            raise ValueError("input_shape applies to models, not to (num_inputs, layers, num_classes) programs")
        return None
    if input_shape is None and not lower.needs_graph(model_or_program):
        return None
    return lower.lower_model(model_or_program, input_shape)


def _netlist(model_or_program, simplify: bool, input_shape):
    """``(num_inputs, netlist, outputs, classes, description)`` of a model or program."""
    graph = _graph(model_or_program, input_shape)
    if graph is not None:
        net = netlist.build_graph(graph.num_inputs, graph.ops, simplify)
        shape = "x".join(str(v) for v in graph.input_shape)
        return graph.num_inputs, net, graph.num_outputs, graph.num_classes, f"{shape} inputs ({graph.description})"
    num_inputs, layers, num_classes = _program(model_or_program)
    net = netlist.build(num_inputs, [tuple(torch.from_numpy(t) for t in layer) for layer in layers], simplify)
    desc = f"{num_inputs} inputs, {len(layers)} layers, {sum(len(a) for a, _, _ in layers)} gates"
    return num_inputs, net, len(layers[-1][0]), num_classes, desc


def c_source(model_or_program, num_bits: int = 64, simplify: bool = True, input_shape=None) -> str:
    """Standalone C99 source of the network (see the module docstring).

    Args:
        model_or_program: ``Sequential(Flatten?, LogicLayer..., GroupSum)``, a convolutional network (see
            :class:`relaxops.logic.PackedLogicNet`; its inputs are the ``C H W`` bits of an image in channel-major
            order, feature ``c H W + y W + x``) or ``(num_inputs, layers, num_classes)``.
        num_bits: samples per word: 8, 16, 32 or 64.
        simplify: emit the simplified netlist (``relaxops.logic.netlist``: constants folded, pass-through and dead
            gates removed; the outputs are unchanged), else one statement per gate of the model.
        input_shape: ``(C, H, W)`` of one image, required for convolutional networks.
    """
    if num_bits not in WORD_TYPES:
        raise ValueError(f"num_bits must be 8, 16, 32 or 64, got {num_bits!r}")
    num_inputs, net, n_last, num_classes, desc = _netlist(model_or_program, simplify, input_shape)
    group = n_last // num_classes
    planes = _planes(group)
    hidden = net.num_gates
    row = torch.full((net.num_nodes,), -1, dtype=torch.int64)  # node -> index in v (gates, in order)
    row[torch.cat([ids for ids, _, _, _ in net.steps])] = torch.arange(hidden)

    def operand(node: int) -> str:
        return f"inp[{node}]" if node < num_inputs else f"v[{int(row[node])}]"

    statements = []
    for ids, a, b, op in net.steps:
        for i, ia, ib, o in zip(ids.tolist(), a.tolist(), b.tolist(), op.tolist()):
            statements.append(f"  v[{int(row[i])}] = (W)({GATE_EXPR[o].format(a=operand(ia), b=operand(ib))});")
    for d, (n, kind) in enumerate(zip(net.out_node.tolist(), net.out_kind.tolist())):
        expr = ("{a}", "~{a}", "0", "ONES")[kind].format(a=operand(n))
        statements.append(f"  out[{d}] = (W)({expr});")
    parts = [statements[i : i + STATEMENTS_PER_FUNCTION] for i in range(0, len(statements), STATEMENTS_PER_FUNCTION)]
    lines = [
        f"/* Logic gate network exported by relaxops: {desc} ({hidden} evaluated), {num_classes} classes. */",
        "#include <stdbool.h>",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdlib.h>",
        "",
        f"typedef {WORD_TYPES[num_bits]} W;",
        "#define ONES ((W) ~(W) 0)",
        f"enum {{ NUM_INPUTS = {num_inputs}, NUM_HIDDEN = {hidden}, NUM_LAST = {n_last}, NUM_CLASSES = {num_classes},",
        f"       GROUP = {group}, PLANES = {planes}, BITS = {num_bits} }};",
        "",
    ]
    for k, part in enumerate(parts):
        lines += [
            f"static void part{k}(const W *restrict inp, W *restrict v, W *restrict out) {{",
            "  (void) inp; (void) v; (void) out;",
            *part,
            "}",
            "",
        ]
    lines += [
        "/* One block of words: inp[NUM_INPUTS] -> out[NUM_LAST]; v holds the gates. */",
        "static void run_net(const W *inp, W *out, W *v) {",
        *[f"  part{k}(inp, v, out);" for k in range(len(parts))],
        "}", "",
        "void logic_gate_net(const W *inp, W *out) {",
        "  W *v = (W *) malloc((NUM_HIDDEN > 0 ? NUM_HIDDEN : 1) * sizeof(W));",
        "  if (v == NULL) return;",
        "  run_net(inp, out, v);",
        "  free(v);",
        "}", "",
        "/* len blocks of BITS samples: inp [len * BITS, NUM_INPUTS] bools -> out [len * BITS, NUM_CLASSES] counts. */",
        "void apply_logic_gate_net(const bool *inp, int32_t *out, size_t len) {",
        "  W *x = (W *) malloc(NUM_INPUTS * sizeof(W));",
        "  W *v = (W *) malloc((NUM_HIDDEN > 0 ? NUM_HIDDEN : 1) * sizeof(W));",
        "  W *y = (W *) malloc(NUM_LAST * sizeof(W));",
        "  W planes[PLANES];",
        "  if (x != NULL && v != NULL && y != NULL) {",
        "    for (size_t i = 0; i < len; ++i) {",
        "      for (size_t d = 0; d < NUM_INPUTS; ++d) {",
        "        W r = 0;",
        "        for (size_t j = 0; j < BITS; ++j)",
        "          r |= (W) ((W) (inp[(i * BITS + j) * NUM_INPUTS + d] ? 1u : 0u) << j);",
        "        x[d] = r;",
        "      }",
        "      run_net(x, y, v);",
        "      for (size_t c = 0; c < NUM_CLASSES; ++c) {",
        "        /* bit-sliced counter: planes[p] holds bit p of each sample's count */",
        "        for (size_t p = 0; p < PLANES; ++p) planes[p] = 0;",
        "        for (size_t g = 0; g < GROUP; ++g) {",
        "          W carry = y[c * GROUP + g];",
        "          for (size_t p = 0; p < PLANES; ++p) {",
        "            const W t = (W) (planes[p] & carry);",
        "            planes[p] ^= carry;",
        "            carry = t;",
        "          }",
        "        }",
        "        for (size_t j = 0; j < BITS; ++j) {",
        "          int32_t n = 0;",
        "          for (size_t p = PLANES; p-- > 0;) n = (int32_t) ((n << 1) | (int32_t) ((planes[p] >> j) & 1u));",
        "          out[(i * BITS + j) * NUM_CLASSES + c] = n;",
        "        }",
        "      }",
        "    }",
        "  }",
        "  free(x);",
        "  free(v);",
        "  free(y);",
        "}",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


# Reserved words of Verilog-2005 and SystemVerilog (IEEE 1800-2017, Annex B): not usable as a module name.
VERILOG_KEYWORDS = frozenset(
    """
accept_on alias always always_comb always_ff always_latch and assert assign assume automatic before begin bind bins
binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle checker class clocking cmos config const
constraint context continue cover covergroup coverpoint cross deassign default defparam design disable dist do edge
else end endcase endchecker endclass endclocking endconfig endfunction endgenerate endgroup endinterface endmodule
endpackage endprimitive endprogram endproperty endspecify endsequence endtable endtask enum event eventually expect
export extends extern final first_match for force foreach forever fork forkjoin function generate genvar global
highz0 highz1 if iff ifnone ignore_bins illegal_bins implements implies import incdir include initial inout input
inside instance int integer interconnect interface intersect join join_any join_none large let liblist library local
localparam logic longint macromodule matches medium modport module nand negedge nettype new nexttime nmos nor
noshowcancelled not notif0 notif1 null or output package packed parameter pmos posedge primitive priority program
property protected pull0 pull1 pulldown pullup pulsestyle_ondetect pulsestyle_onevent pure rand randc randcase
randsequence rcmos real realtime ref reg reject_on release repeat restrict return rnmos rpmos rtran rtranif0 rtranif1
s_always s_eventually s_nexttime s_until s_until_with scalared sequence shortint shortreal showcancelled signed small
soft solve specify specparam static string strong strong0 strong1 struct super supply0 supply1 sync_accept_on
sync_reject_on table tagged task this throughout time timeprecision timeunit tran tranif0 tranif1 tri tri0 tri1
triand trior trireg type typedef union unique unique0 unsigned until until_with untyped use uwire var vectored
virtual void wait wait_order wand weak weak0 weak1 while wildcard wire with within wor xnor xor
""".split()
)


def _check_module_name(name) -> str:
    """An ASCII identifier (letter or underscore, then letters, digits, underscores) that is not a keyword."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"module_name must be an ASCII identifier ([A-Za-z_][A-Za-z0-9_]*), got {name!r}")
    if name in VERILOG_KEYWORDS:
        raise ValueError(f"module_name must not be a Verilog/SystemVerilog keyword, got {name!r}")
    return name


def _verilog_netlist(graph, module_name: str, simplify: bool) -> tuple[list[str], list[str]]:
    """Header, ports and gate assignments of a lowered (convolutional) network: one wire per gate of its netlist."""
    net = netlist.build_graph(graph.num_inputs, graph.ops, simplify)
    shape = "x".join(str(v) for v in graph.input_shape)
    lines = [
        f"// Logic gate network exported by relaxops: {shape} inputs in channel-major order (x[c*H*W + y*W + "
        f"x]), {graph.description}, {net.num_gates} gates emitted, {graph.num_classes} classes.",
        f"module {module_name} (",
    ]

    def operand(node: int) -> str:
        return f"x[{node}]" if node < graph.num_inputs else f"g{node}"

    body = []
    for ids, a, b, op in net.steps:
        for i, ia, ib, o in zip(ids.tolist(), a.tolist(), b.tolist(), op.tolist()):
            expr = GATE_EXPR[o].format(a=operand(ia), b=operand(ib))
            expr = {"0": "1'b0", "ONES": "1'b1"}.get(expr, expr)
            body.append(f"  wire g{i} = {expr};")
    for d, (n, kind) in enumerate(zip(net.out_node.tolist(), net.out_kind.tolist())):
        expr = ("{a}", "~{a}", "1'b0", "1'b1")[kind].format(a=operand(n))
        body.append(f"  assign y[{d}] = {expr};")
    return lines, body


def verilog_source(
    model_or_program, module_name: str = "logic_net", group_counts: bool = True, input_shape=None, simplify: bool = True
) -> str:
    """A combinational Verilog-2001 module of the network.

    ``module_name``: an ASCII identifier that is not a Verilog or SystemVerilog keyword.
    Ports: ``input wire [N-1:0] x``, ``output wire [M-1:0] y`` (the last layer's outputs) and, with
    ``group_counts``, ``output wire [C*LB-1:0] counts`` (class ``c`` at ``counts[c*LB +: LB]``, ``LB`` the bits of a
    count in ``0..M/C``).

    Convolutional networks (``input_shape=(C, H, W)`` required; ``x`` holds the image's bits channel-major, bit
    ``c H W + y W + x``) are emitted as their netlist, one wire per gate (``simplify``: of the simplified
    netlist); dense networks one assignment per gate of each layer, as they are (``simplify`` does not apply).
    """
    _check_module_name(module_name)
    graph = _graph(model_or_program, input_shape)
    if graph is not None:
        num_inputs, n_last, num_classes = graph.num_inputs, graph.num_outputs, graph.num_classes
        header, body = _verilog_netlist(graph, module_name, simplify)
        layers = []
    else:
        num_inputs, layers, num_classes = _program(model_or_program)
        n_last = len(layers[-1][0])
        header = [
            f"// Logic gate network exported by relaxops: {num_inputs} inputs, {len(layers)} layers, "
            f"{num_classes} classes.",
            f"module {module_name} (",
        ]
        body = []
    group = n_last // num_classes
    lb = _planes(group)
    ports = [f"  input wire [{num_inputs - 1}:0] x", f"  output wire [{n_last - 1}:0] y"]
    if group_counts:
        ports.append(f"  output wire [{num_classes * lb - 1}:0] counts")
    lines = [*header, ",\n".join(ports), ");", *body]
    prev = "x"
    for index, (a, b, op) in enumerate(layers):
        name = f"l{index}"
        lines.append(f"  wire [{len(a) - 1}:0] {name};")
        for j, (ia, ib, o) in enumerate(zip(a.tolist(), b.tolist(), op.tolist())):
            expr = GATE_EXPR[o].format(a=f"{prev}[{ia}]", b=f"{prev}[{ib}]")
            expr = {"0": "1'b0", "ONES": "1'b1"}.get(expr, expr)
            lines.append(f"  assign {name}[{j}] = {expr};")
        prev = name
    if layers:
        lines.append(f"  assign y = {prev};")
    if group_counts:
        for c in range(num_classes):
            terms = " + ".join(
                f"{{{{{lb - 1}{{1'b0}}}}, y[{c * group + i}]}}" if lb > 1 else f"y[{c * group + i}]"
                for i in range(group)
            )
            lines.append(f"  assign counts[{c * lb} +: {lb}] = {terms};")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


_C_INT = {8: ctypes.c_int8, 16: ctypes.c_int16, 32: ctypes.c_int32, 64: ctypes.c_int64}


class CompiledLogicNet(torch.nn.Module):
    """A trained network compiled to a shared library with the system C compiler (difflogic's class).

    Args:
        model: ``Sequential(Flatten?, LogicLayer..., GroupSum)`` or a convolutional network (with
            ``input_shape``; see :func:`c_source`), or None (used by :meth:`load`).
        device: ``'cpu'`` (the only target).
        num_bits: samples per machine word: 8, 16, 32 or 64.
        cpu_compiler: ``'gcc'`` or ``'clang'``.
        verbose: print the compiler command and times.
        input_shape: ``(C, H, W)`` of one image, for convolutional networks; the object then also takes
            ``[B, C, H, W]`` Boolean batches.

    The attribute ``simplify`` (default True) selects the simplified netlist or one statement per gate (see
    :func:`c_source`); the constructor keeps difflogic's signature.

    ``compile()`` builds the library; calling the object on a Boolean ``[B, num_inputs]`` array or tensor returns
    the int32 class counts ``[B, num_classes]`` (equal to ``round(model.eval()(x) * tau)``).
    """

    def __init__(
        self,
        model,
        device: str = "cpu",
        num_bits: int = 64,
        cpu_compiler: str = "gcc",
        verbose: bool = False,
        input_shape=None,
    ):
        super().__init__()
        if device != "cpu":
            raise ValueError(f"device must be 'cpu' (compiled networks run on the CPU), got {device!r}")
        if num_bits not in WORD_TYPES:
            raise ValueError(f"num_bits must be 8, 16, 32 or 64, got {num_bits!r}")
        if cpu_compiler not in ("gcc", "clang"):
            raise ValueError(f"cpu_compiler must be 'gcc' or 'clang', got {cpu_compiler!r}")
        self.model, self.device, self.num_bits, self.cpu_compiler = model, device, num_bits, cpu_compiler
        self.simplify = True
        self.num_inputs = self.num_classes = None
        self.layers = []
        self.graph = None if model is None else _graph(model, input_shape)
        self.input_shape = None if self.graph is None else self.graph.input_shape
        if self.graph is not None:
            self.num_inputs, self.num_classes = self.graph.num_inputs, self.graph.num_classes
        elif model is not None:
            self.num_inputs, self.layers, self.num_classes = _program(model)
            if verbose:
                print(f"{len(self.layers)} logic layers, {self.num_inputs} inputs, {self.num_classes} classes")
        self.lib_fn = None
        self._lib = None

    def get_c_code(self) -> str:
        if self.graph is not None:
            return c_source(self.model, self.num_bits, self.simplify, self.input_shape)
        return c_source((self.num_inputs, self.layers, self.num_classes), self.num_bits, self.simplify)

    def compile(self, opt_level: int = 1, save_lib_path=None, verbose: bool = False) -> None:
        """Compiles the C source (``<compiler> -shared -fPIC -O<opt_level>``) and loads the library; copies it to
        ``save_lib_path`` when given. Raises RuntimeError with the compiler's messages on failure."""
        if self.model is None and not self.layers:
            raise RuntimeError("a CompiledLogicNet made by load() has no network to compile")
        compiler_path = shutil.which(self.cpu_compiler)
        if compiler_path is None:
            raise RuntimeError(f"C compiler {self.cpu_compiler!r} not found")
        with tempfile.TemporaryDirectory(prefix="relaxops-logic-") as tmp:
            src, lib = os.path.join(tmp, "logic_net.c"), os.path.join(tmp, "logic_net.so")
            with open(src, "w") as f:
                f.write(self.get_c_code())
            cmd = [compiler_path, "-shared", "-fPIC", f"-O{int(opt_level)}", "-std=c99", "-o", lib, src]
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"compilation failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}")
            if verbose:
                print(f"compiled {src} in {time.perf_counter() - start:.2f} s: {' '.join(cmd)}")
            if save_lib_path is not None:
                shutil.copy(lib, save_lib_path)
            self._bind(lib)

    def _bind(self, path) -> None:
        self._lib = ctypes.CDLL(os.fspath(path))
        fn = self._lib.apply_logic_gate_net
        fn.restype = None
        fn.argtypes = [
            np.ctypeslib.ndpointer(ctypes.c_bool, flags="C_CONTIGUOUS"),
            np.ctypeslib.ndpointer(ctypes.c_int32, flags="C_CONTIGUOUS"),
            ctypes.c_size_t,
        ]
        self.lib_fn = fn

    @staticmethod
    def load(save_lib_path, num_classes: int, num_bits: int) -> CompiledLogicNet:
        """A CompiledLogicNet running a library saved by ``compile(save_lib_path=...)``."""
        self = CompiledLogicNet(None, num_bits=num_bits)
        self.num_classes = int(num_classes)
        self._bind(save_lib_path)
        return self

    def forward(self, x, verbose: bool = False) -> torch.Tensor:
        if self.lib_fn is None:
            raise RuntimeError("call compile() (or load()) first")
        if isinstance(x, torch.Tensor):
            if x.dtype != torch.bool:
                raise TypeError(f"x must be a bool tensor or array, got {x.dtype}")
            x = x.cpu().numpy()
        x = np.asarray(x)
        if self.input_shape is not None and x.shape[1:] == self.input_shape:  # images [B, C, H, W], channel-major
            x = x.reshape(x.shape[0], -1)
        if x.dtype != np.bool_:
            raise TypeError(f"x must be a bool tensor or array, got {x.dtype}")
        if x.ndim != 2 or (self.num_inputs is not None and x.shape[1] != self.num_inputs):
            raise ValueError(f"x must have shape [B, {self.num_inputs or 'num_inputs'}], got {x.shape}")
        B = x.shape[0]
        blocks = -(-B // self.num_bits)
        padded = np.zeros((blocks * self.num_bits, x.shape[1]), dtype=np.bool_)  # exactly pad_len zero rows
        padded[:B] = x
        out = np.zeros(blocks * self.num_bits * self.num_classes, dtype=np.int32)
        self.lib_fn(padded.reshape(-1), out, blocks)
        if verbose:
            print(f"ran {blocks} blocks of {self.num_bits} samples")
        return torch.from_numpy(out.reshape(-1, self.num_classes)[:B].copy())
