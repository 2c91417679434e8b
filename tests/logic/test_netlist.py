"""The simplified netlist and its slot program (relaxops.logic.netlist) against a direct evaluation of the layers:
the simplifications are exact, and the program's arena never overwrites a live node."""

import pytest
import torch
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
    rows = [v if k == netlist.NODE else ~v if k == netlist.NOT_NODE else torch.full_like(v, k == netlist.ONE)
            for k, v in zip(kind.tolist(), values)]
    return torch.stack(rows)


def evaluate_netlist(net, x):
    values = dict(enumerate(x))
    for ids, a, b, op in net.steps:
        if ids.numel():
            out = gate(op, torch.stack([values[i] for i in a.tolist()]), torch.stack([values[i] for i in b.tolist()]))
            values.update(zip(ids.tolist(), out))
    return output_rows(net.out_kind, [values.get(n, x[0]) for n in net.out_node.tolist()])


def evaluate_program(prog, x):
    arena = dict(enumerate(x))
    steps = (prog.op_start.numel() - 1) // 16
    for s in range(steps):
        lo, hi = int(prog.op_start[16 * s]), int(prog.op_start[16 * s + 16])
        reads = set(prog.src_a[lo:hi].tolist()) | set(prog.src_b[lo:hi].tolist())
        writes = prog.dst[lo:hi].tolist()
        assert not reads & set(writes), "a step overwrites a slot it reads"
        assert len(set(writes)) == len(writes)
        assert all(0 <= w < prog.num_slots for w in writes)
        for o in range(16):
            assert bool((prog.op[int(prog.op_start[16 * s + o]) : int(prog.op_start[16 * s + o + 1])] == o).all())
        if hi > lo:
            out = gate(prog.op[lo:hi].long(), torch.stack([arena[i] for i in prog.src_a[lo:hi].tolist()]),
                       torch.stack([arena[i] for i in prog.src_b[lo:hi].tolist()]))
            arena.update(zip(writes, out))
    return output_rows(prog.out_kind, [arena[i] if k < 2 else x[0] for i, k in
                                       zip(prog.out_slot.tolist(), prog.out_kind.tolist())])


def random_layers(gen, widths):
    return [(torch.randint(0, i, (o,), generator=gen), torch.randint(0, i, (o,), generator=gen),
             torch.randint(0, 16, (o,), generator=gen)) for i, o in zip(widths[:-1], widths[1:])]


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
    layer1 = (torch.tensor([0, 1, 2, 3, 4, 1]), torch.tensor([3, 2, 2, 3, 2, 2]),
              torch.tensor([AND, AND, OR, XOR, OR, NAND]))
    net = netlist.build(2, [layer0, layer1])
    # one & g3 = g3 (the AND node); in0 & ~in1 = a real gate (op 2) on the inputs; ~in1 | ~in1 = ~in1;
    # g3 ^ g3 = 0; 0 | ~in1 = ~in1; ~(in0 & ~in1) = a real gate (op 13: ~a | b) on the inputs
    assert net.out_kind.tolist() == [netlist.NODE, netlist.NODE, netlist.NOT_NODE, netlist.ZERO, netlist.NOT_NODE,
                                     netlist.NODE]
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
    # the inputs take slots 0-2 and are read by step 0, whose gates take new slots 3, 4; step 1 reuses slot 0
    assert prog.num_slots == 5 and prog.dst.tolist() == [3, 4, 0] and prog.out_slot.tolist() == [0]
