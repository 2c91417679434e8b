"""The simplified netlist and its slot program (relaxops.logic.netlist) against a direct evaluation of the layers:
the simplifications are exact, and the program's arena never overwrites a live node."""

import pytest
import torch
from relaxops import _ext
from relaxops.logic import netlist


def gate(op, x, y):
    """Gates ``op [n]`` on Boolean rows ``x, y [n, S]`` (truth table id = 8 T00 + 4 T01 + 2 T10 + T11)."""
    return ((op[:, None] >> (3 - 2 * x.long() - y.long())) & 1).bool()


def evaluate_layers(layers, x):
    for a, b, op in layers:
        x = gate(op, x[a], x[b])
    return x


def output_rows(kind, values):
    """Rows of outputs of the given kinds (0 node, 1 negated node, 2 zero, 3 one) from their node values."""
    rows = [
        v if k == netlist.NODE else ~v if k == netlist.NOT_NODE else torch.full_like(v, k == netlist.ONE)
        for k, v in zip(kind.tolist(), values)
    ]
    return torch.stack(rows)


def evaluate_netlist(net, x):
    values = dict(enumerate(x))
    for ids, a, b, op in net.steps:
        if ids.numel():
            out = gate(op, torch.stack([values[i] for i in a.tolist()]), torch.stack([values[i] for i in b.tolist()]))
            values.update(zip(ids.tolist(), out))
    return output_rows(net.out_kind, [values.get(n, x[0]) for n in net.out_node.tolist()])


def evaluate_program(prog, x):
    """The program run entry by entry (plain runs: one gate; fused runs: outer(inner(a, b), c)), checking that no
    step overwrites a slot it reads and that each entry's op matches its run."""
    arena = dict(enumerate(x))
    R, fusable = netlist.RUNS, netlist.FUSABLE_OPS
    steps = (prog.op_start.numel() - 1) // R
    for s in range(steps):
        lo, hi = int(prog.op_start[R * s]), int(prog.op_start[R * s + R])
        reads = set(prog.src_a[lo:hi].tolist()) | set(prog.src_b[lo:hi].tolist())
        writes = prog.dst[lo:hi].tolist()
        assert len(set(writes)) == len(writes)
        assert all(0 <= w < prog.num_slots for w in writes)
        out = []
        for r in range(R):
            i0, i1 = int(prog.op_start[R * s + r]), int(prog.op_start[R * s + r + 1])
            if i1 == i0:
                continue
            a = torch.stack([arena[i] for i in prog.src_a[i0:i1].tolist()])
            b = torch.stack([arena[i] for i in prog.src_b[i0:i1].tolist()])
            if r < 16:
                assert bool((prog.op[i0:i1] == r).all())
                out.append(gate(torch.full((i1 - i0,), r), a, b))
                continue
            inner, outer = fusable[(r - 16) // len(fusable)], fusable[(r - 16) % len(fusable)]
            assert bool((prog.op[i0:i1] == 16 * inner + outer).all())
            reads |= set(prog.src_c[i0:i1].tolist())
            c = torch.stack([arena[i] for i in prog.src_c[i0:i1].tolist()])
            out.append(gate(torch.full((i1 - i0,), outer), gate(torch.full((i1 - i0,), inner), a, b), c))
        assert not reads & set(writes), "a step overwrites a slot it reads"
        if out:
            arena.update(zip(writes, torch.cat(out)))
    return output_rows(
        prog.out_kind, [arena[i] if k < 2 else x[0] for i, k in zip(prog.out_slot.tolist(), prog.out_kind.tolist())]
    )


def random_layers(gen, widths):
    return [
        (
            torch.randint(0, i, (o,), generator=gen),
            torch.randint(0, i, (o,), generator=gen),
            torch.randint(0, 16, (o,), generator=gen),
        )
        for i, o in zip(widths[:-1], widths[1:])
    ]


@pytest.mark.parametrize("simplify", [True, False], ids=["simplified", "every-gate"])
def test_netlist_and_program_equal_the_layers(simplify):
    gen = torch.Generator().manual_seed(0)
    for trial in range(150):
        widths = torch.randint(1, 19, (int(torch.randint(2, 6, (), generator=gen)),), generator=gen).tolist()
        layers = random_layers(gen, widths)
        x = torch.rand(widths[0], 37, generator=gen) > 0.5
        expected = evaluate_layers(layers, x)
        net = netlist.build(widths[0], layers, simplify)
        assert torch.equal(evaluate_netlist(net, x), expected), trial
        assert torch.equal(evaluate_program(netlist.allocate(net), x), expected), trial
        if not simplify:
            assert net.num_gates == sum(widths[1:]) and bool((net.out_kind == netlist.NODE).all())


def test_simplification_rules():
    # inputs 0, 1; layer 0: [one, a, not b, a and b, a xor a]; layer 1 reads them
    ONE, A, NOT_B, AND, XOR, OR, NAND = 15, 3, 10, 1, 6, 7, 14
    layer0 = (torch.tensor([0, 0, 0, 0, 0]), torch.tensor([1, 1, 1, 1, 0]), torch.tensor([ONE, A, NOT_B, AND, XOR]))
    layer1 = (
        torch.tensor([0, 1, 2, 3, 4, 1]),
        torch.tensor([3, 2, 2, 3, 2, 2]),
        torch.tensor([AND, AND, OR, XOR, OR, NAND]),
    )
    net = netlist.build(2, [layer0, layer1])
    # one & g3 = g3 (the AND node); in0 & ~in1 = a real gate (op 2) on the inputs; ~in1 | ~in1 = ~in1;
    # g3 ^ g3 = 0; 0 | ~in1 = ~in1; ~(in0 & ~in1) = a real gate (op 13: ~a | b) on the inputs
    assert net.out_kind.tolist() == [
        netlist.NODE,
        netlist.NODE,
        netlist.NOT_NODE,
        netlist.ZERO,
        netlist.NOT_NODE,
        netlist.NODE,
    ]
    assert net.out_node[2] == 1 and net.out_node[4] == 1
    ids0, a0, b0, op0 = net.steps[0]
    assert a0.tolist() == [0] and b0.tolist() == [1] and op0.tolist() == [AND]  # the only layer-0 gate left
    assert net.out_node[0] == ids0[0]
    ids1, a1, b1, op1 = net.steps[1]
    assert sorted(zip(a1.tolist(), b1.tolist(), op1.tolist())) == [(0, 1, 2), (0, 1, 13)]
    assert net.num_gates == 3


def test_dead_gates_are_dropped():
    layer0 = (torch.tensor([0, 1, 0]), torch.tensor([1, 2, 2]), torch.tensor([1, 6, 7]))  # and, xor, or
    layer1 = (torch.tensor([0]), torch.tensor([2]), torch.tensor([1]))  # reads gates 0 and 2 only
    net = netlist.build(3, [layer0, layer1])
    assert net.steps[0][3].tolist() == [1, 7] and net.num_gates == 3
    prog = netlist.allocate(net)
    # gate 0 (and, read only by the layer-1 gate) is fused into it: step 0 runs the or gate alone into new slot 3;
    # step 1 runs and(and(in0, in1), slot 3) into slot 2, freed by in2 after step 0 (in0, in1 live until step 1)
    R, AND = netlist.RUNS, 1
    assert prog.num_slots == 4 and prog.dst.tolist() == [3, 2] and prog.out_slot.tolist() == [2]
    assert prog.src_a.tolist() == [0, 0] and prog.src_b.tolist() == [2, 1] and prog.src_c.tolist() == [0, 3]
    fused_run = 16 + len(netlist.FUSABLE_OPS) * netlist.FUSABLE_OPS.index(AND) + netlist.FUSABLE_OPS.index(AND)
    assert int(prog.op_start[R + fused_run + 1] - prog.op_start[R + fused_run]) == 1 and prog.num_gates == 3


def test_pair_fusion_of_trees():
    """A depth-3 tree per output (fanout-1 gates): level 1 fused into level 2 (its first or second input, the
    second through the swapped truth table), level 3 plain, and the program equals the layers."""
    gen = torch.Generator().manual_seed(3)
    layers = [
        (torch.arange(0, 16, 2), torch.arange(1, 16, 2), torch.tensor([1, 2, 4, 6, 7, 8, 9, 11])),
        (torch.tensor([1, 2, 5, 6]), torch.tensor([0, 3, 4, 7]), torch.tensor([2, 13, 4, 11])),
        (torch.tensor([0, 2]), torch.tensor([1, 3]), torch.tensor([14, 6])),
    ]
    net = netlist.build(16, layers)
    prog = netlist.allocate(net)
    R = netlist.RUNS
    counts = (prog.op_start[1:] - prog.op_start[:-1]).reshape(-1, R)
    assert counts[0].sum() == 4 and counts[1, 16:].sum() == 4 and counts[1, :16].sum() == 0  # 4 pairs
    assert counts[2, :16].sum() == 2 and prog.num_gates == net.num_gates == 14
    x = torch.rand(16, 70, generator=gen) > 0.5
    assert torch.equal(evaluate_program(prog, x), evaluate_layers(layers, x))


@pytest.mark.skipif(not _ext.has_cpu(), reason="relaxops._C is not built")
def test_fusable_ops_agree_with_the_engine():
    assert tuple(_ext._C.logic_packed_fusable_ops()) == netlist.FUSABLE_OPS
    # exactly the gates that depend on both inputs (table id = 8 T00 + 4 T01 + 2 T10 + T11)
    both = [
        o
        for o in range(16)
        if (o >> 3 & 1) ^ (o >> 2 & 1) | (o >> 1 & 1) ^ (o & 1) and (o >> 3 & 1) ^ (o >> 1 & 1) | (o >> 2 & 1) ^ (o & 1)
    ]
    assert tuple(both) == netlist.FUSABLE_OPS
