"""A function's inputs and outputs by name (runtime/call_signature.py): the inputs in the parameters'
order, the outputs as ``dict(zip(outputs, values))`` with ``as_output`` on sequences and maps, and
``run``'s errors for a missing or unknown input as before."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.call_signature import namer, taker


@pytest.mark.parametrize("names", [(), ("x",), ("x", "y"), ("b", "a", "c")])
def test_run_takes_the_inputs_in_the_signatures_order(names):
    """``_taker``: the inputs as a tuple in the parameters' order, KeyError for a missing name."""
    take = taker(names)
    inputs = {n: i for i, n in enumerate(sorted(names))}
    assert take(inputs) == tuple(inputs[n] for n in names)
    if names:
        with pytest.raises(KeyError):
            take({})


@pytest.mark.parametrize("outputs", [("y",), ("label", "probabilities"), ("a", "b", "a"), ("a", "a"),
                                     tuple(f"o{i}" for i in range(16)), tuple(f"o{i}" for i in range(17))])
def test_run_names_the_outputs_as_dict_of_zip(outputs):
    """``_namer``: the dict ``dict(zip(outputs, values))`` makes, keys in the same order (a repeated
    name's last value at its first place), by a display up to 16 outputs and zip beyond."""
    values = tuple(np.full(1, i) for i in range(len(outputs)))
    got, want = namer(outputs, ("tensor",) * len(outputs))(values), dict(zip(outputs, values))
    assert list(got) == list(want) and all(got[k] is want[k] for k in want)


@pytest.mark.parametrize("count", [2, 17])
def test_run_converts_the_outputs_whose_kind_asks_as_as_output(count):
    """Sequences become lists and maps dicts of Python scalars (``as_output``), at their positions
    only; tensors and optionals pass as they are."""
    from relaxpack.runtime.containers import as_output
    kinds = ("sequence", "tensor", "map", "optional_tensor") * (count // 4) + ("tensor",) * (count % 4)
    outputs = tuple(f"o{i}" for i in range(count))
    values = tuple((np.ones(1), np.zeros(2)) if kind == "sequence" else {1: np.float32(2.5)} if kind == "map"
                   else np.full(1, i) for i, kind in enumerate(kinds))
    got = namer(outputs, kinds)(values)
    assert list(got) == list(outputs)
    for name, value, kind in zip(outputs, values, kinds):
        want = as_output(value, kind)
        assert type(got[name]) is type(want) and (got[name] is value) == (want is value), kind
        if kind == "map":
            assert got[name] == {1: 2.5} and type(got[name][1]) is float
        elif kind == "sequence":
            assert len(got[name]) == 2 and got[name][0] is value[0]


def test_run_of_three_inputs_and_two_outputs_names_them():
    """A model's inputs given in any order of the dict reach their parameters; both outputs by name."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Sub", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "abc"],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("y", "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=0))
    a, b, c = (np.arange(3, dtype=np.float32) * k for k in (1, 5, 7))
    got = vm.run({"c": c, "b": b, "a": a})
    assert list(got) == ["y", "s"]
    np.testing.assert_array_equal(got["y"], (a - b) * c)
    np.testing.assert_array_equal(got["s"], a - b)
    with pytest.raises(relaxpack.errors.InputError, match="missing input"):
        vm.run({"c": c, "a": a})
    with pytest.raises(relaxpack.errors.InputError, match="unknown input"):
        vm.run({"c": c, "a": a, "d": b})        # (as many names: the taker's KeyError, then the check)
