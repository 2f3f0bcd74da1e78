"""Outputs never share memory with inputs, constants or each other (issue 20, item 6).

``Identity(x)`` used to return the caller's own array: writing into the
output changed the input. onnxruntime returns copies; so does the VM now,
copying only the outputs that overlap."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.output_copy import OutputDetacher, byte_range

F = TensorProto.FLOAT
CONST = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
SHAPE = numpy_helper.from_array(np.array([3, 2], np.int64), "s")


def graph_model(nodes, outputs, inits=(), extra_inputs=(), opset=17):
    inputs = [helper.make_tensor_value_info("x", F, ["n", 3])] + list(extra_inputs)
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


MODELS = {
    "identity": graph_model([helper.make_node("Identity", ["x"], ["y"])], ["y"]),
    "reshape": graph_model([helper.make_node("Reshape", ["x", "s"], ["y"])], ["y"], [SHAPE]),
    "runtime reshape": graph_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], ["y"],
                                   extra_inputs=[helper.make_tensor_value_info("shape", TensorProto.INT64, [2])]),
    "flatten": graph_model([helper.make_node("Flatten", ["x"], ["y"], axis=0)], ["y"]),
    "input is output": graph_model([], ["x"]),
    "constant output": graph_model([helper.make_node("Identity", ["x"], ["y"])], ["y", "c"], [CONST]),
    "identity of a constant": graph_model([helper.make_node("Identity", ["c"], ["y"])], ["y"], [CONST]),
    "one value twice": graph_model([helper.make_node("Relu", ["x"], ["r"]),
                                    helper.make_node("Identity", ["r"], ["y"])], ["r", "y"]),
}


def inputs_for(name):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    return {"x": x, "shape": np.array([3, 2], np.int64)} if name == "runtime reshape" else {"x": x}


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_are_the_callers_own_arrays(name, level, tmp_path):
    exe = relaxpack.build(relaxpack.from_onnx(MODELS[name]), opt_level=level)
    exe.save(tmp_path / "m.rpk")
    for program in (exe, load(tmp_path / "m.rpk")):
        vm = VirtualMachine(program)
        feeds = inputs_for(name)
        kept = {k: v.copy() for k, v in feeds.items()}
        outputs = vm.run(feeds)
        first = {k: v.copy() for k, v in outputs.items()}
        for k, out in outputs.items():
            assert out.flags.writeable, k
            assert not any(np.shares_memory(out, v) for v in feeds.values()), k
            assert not any(np.shares_memory(out, c) for c in program.constants), k
            assert not any(np.shares_memory(out, o) for j, o in outputs.items() if j != k), k
            out[...] = 1000     # the caller owns it: writing changes nothing else
        for k in feeds:
            np.testing.assert_array_equal(feeds[k], kept[k])
        again = vm.run(feeds)
        for k in first:
            np.testing.assert_array_equal(again[k], first[k])


def test_positional_calls_get_copies_too():
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(MODELS["identity"])))
    x = np.ones((2, 3), np.float32)
    assert not np.shares_memory(vm["main"](x), x)


def test_only_overlapping_outputs_are_copied():
    constants = [np.zeros(8, np.float32), np.ones((2, 2))]
    detach = OutputDetacher(constants)
    x, fresh = np.zeros(4), np.zeros(4)
    result = detach((x[1:], fresh, constants[0][2:5], constants[1].T, np.zeros(0)), (x,))
    assert result[1] is fresh and result[4].size == 0
    assert not any(np.shares_memory(r, s) for r in (result[0], result[2], result[3])
                   for s in (x, *constants))
    lo, hi = byte_range(constants[1].T[::-1])
    assert hi - lo == constants[1].nbytes


def test_a_single_output_is_copied_only_when_it_overlaps():
    """One array result takes the short path: arrays that own their memory overlap only themselves."""
    owned, mapped = np.zeros(3), np.frombuffer(bytearray(24), np.float64)
    detach, x, fresh = OutputDetacher([owned, mapped]), np.ones(3), np.ones(3)
    assert detach(fresh, (x,)) is fresh and detach(fresh, (x[:2],)) is fresh
    for result in (owned, mapped, mapped[1:], x, x[1:]):
        copied = detach(result, (x,))
        assert copied is not result and not np.shares_memory(copied, result)
    base = np.zeros(4)
    assert detach(base, (base[1:],)) is not base         # an input that views the output


def test_run_with_a_list_says_how_to_pass_inputs():
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(MODELS["identity"])))
    with pytest.raises(relaxpack.errors.InputError, match=r"run takes the inputs by name, e.g. \{'x': \.\.\.\}, "
                                                          r"got a list"):
        vm.run([np.ones((2, 3), np.float32)])


def test_tuples_of_owned_outputs_pass_as_they_are_unless_one_is_shared():
    """The shortest path (``_owned_apart``): outputs that own their memory, apart from every
    input and constant, come back as they are; an output twice, an owned constant, an input
    returned, or an input that views an output still get copies."""
    owned = np.zeros(3)
    detach, x = OutputDetacher([owned]), np.ones(3)
    a, b = np.ones(2), np.ones(2)
    result = detach((a, b), (x,))
    assert result[0] is a and result[1] is b
    twice = detach((a, a), (x,))
    assert twice[0] is a and twice[1] is not a and not np.shares_memory(twice[0], twice[1])
    for shared in (owned, x):
        got = detach((a, shared), (x,))
        assert got[0] is a and got[1] is not shared and not np.shares_memory(got[1], shared)
    got = detach((a, b), (x, b[1:]))
    assert got[0] is a and not np.shares_memory(got[1], b[1:])


def test_maps_and_unchanged_tuples_pass_as_they_are():
    """ZipMap's PlainMaps (fresh dicts of Python scalars) reaches as_map_output as it is (which
    then converts nothing), and a tuple whose arrays need no copy is not rebuilt."""
    from relaxpack.runtime.maps import PlainMaps
    detach, x = OutputDetacher([]), np.ones(3)
    maps = PlainMaps([{1: 0.5}, {1: 0.25}])
    nested = (np.ones(2), (np.zeros(2),))
    result = detach((x[1:], maps, nested), (x,))
    assert result[1] is maps and result[2] is nested
    assert not np.shares_memory(result[0], x)
    labels = np.arange(2)                       # a classifier's labels beside its maps: the shortest path
    assert detach._owned_apart((labels, maps), (x,))
    result = detach((labels, maps), (x,))
    assert result[0] is labels and result[1] is maps
    assert not detach._owned_apart((x, maps), (x,))            # an input returned beside maps: copied
    from relaxpack.runtime.maps import as_map_input
    given = as_map_input({"a": 1.5}, "m", "map", "string", "float32")
    assert detach._owned_apart((labels, maps), (given,))      # a canonical map input holds no array
    assert not detach._owned_apart((labels, maps), ({"a": np.ones(2)},))   # a plain dict may
    result = detach((x, maps), (x,))
    assert result[0] is not x and not np.shares_memory(result[0], x) and result[1] is maps


def test_views_of_fresh_arrays_pass_as_they_are_and_shared_owners_are_copied():
    """A view's base is the array owning its memory: outputs viewing fresh arrays pass as
    they are; one whose owner holds a constant (a constant that is itself a view), an input,
    or another output's memory is copied; a base numpy does not own goes to the full check."""
    owner = np.zeros(8)
    constant_view = owner[2:4]
    detach, x = OutputDetacher([constant_view]), np.ones(3)
    fresh, other = np.ones(6), np.ones(4)
    a, b = fresh.reshape(2, 3), other[1:]
    got = detach((a, b), (x, x[1:]))
    assert got[0] is a and got[1] is b
    for shared in (owner, owner[2:3]):                  # the constant's memory: copied
        got = detach((a, shared), (x,))
        assert got[0] is a and got[1] is not shared and not np.shares_memory(got[1], owner)
    apart = owner[5:]                                    # the constant's owner, not its bytes: the full check keeps it
    assert detach((a, apart), (x,))[1] is apart
    got = detach((a, fresh[:2]), (x,))                   # two outputs of one owner
    assert not np.shares_memory(got[0], got[1])
    got = detach(a, (fresh[4:],))                        # an input that views the output's owner
    assert got is not a
    mapped = np.frombuffer(bytearray(48), np.float64)
    got = detach(mapped[1:], (x,))
    assert got.base is mapped and np.shares_memory(got, mapped)      # no overlap: the full check keeps it


# ---------------------------------------------------------------- fresh_returns: decided from the bytecode

ALLOC, TUPLE, GET = "vm.builtin.alloc_tensor", "vm.builtin.make_tuple", "vm.builtin.tuple_getitem"


def _alloc(dst):
    from relaxpack.runtime.bytecode import Call
    return Call(dst, 0, (("i", "float32"), ("i", (2,))))


def _fresh(instrs, names, num_params=1):
    from relaxpack.runtime.output_copy import fresh_returns
    return fresh_returns(instrs, names, num_params)


def test_fresh_returns_takes_allocations_and_their_tuples():
    from relaxpack.runtime.bytecode import Call, Ret
    one = [_alloc(1), Call(-1, 3, (("r", 0),), (("out", ("r", 1)),)), Ret(1)]
    assert _fresh(one, {0: ALLOC})
    pair = [_alloc(1), _alloc(2), Call(3, 1, (("r", 1), ("r", 2))), Ret(3)]
    assert _fresh(pair, {0: ALLOC, 1: ALLOC, 2: TUPLE})
    # a kernel writing into a tuple of allocations, its fields taken out and returned
    out = [_alloc(1), _alloc(2), Call(3, 2, (("r", 1), ("r", 2))), Call(-1, 9, (("r", 0),), (("out", ("r", 3)),)),
           Call(4, 4, (("r", 3), ("i", 0))), Call(5, 5, (("r", 3), ("i", 1))), Call(6, 6, (("r", 4), ("r", 5))),
           Ret(6)]
    names = {0: ALLOC, 1: ALLOC, 2: TUPLE, 4: GET, 5: GET, 6: TUPLE}
    assert _fresh(out, names)


def test_fresh_returns_refuses_what_may_share():
    from relaxpack.runtime.bytecode import Call, Ret
    assert not _fresh([Ret(0)], {})                                           # the input itself
    assert not _fresh([Call(1, 7, (("r", 0),)), Ret(1)], {})                  # a kernel's result (a view?)
    # written by an allocation on one path and by a kernel on another
    assert not _fresh([_alloc(1), Call(1, 7, (("r", 0),)), Ret(1)], {0: ALLOC})
    # the same allocation twice, directly or through two fields
    assert not _fresh([_alloc(1), Call(2, 1, (("r", 1), ("r", 1))), Ret(2)], {0: ALLOC, 1: TUPLE})
    twice = [_alloc(1), Call(2, 1, (("r", 1),)), Call(3, 2, (("r", 2), ("i", 0))),
             Call(4, 3, (("r", 1), ("r", 3))), Ret(4)]
    assert not _fresh(twice, {0: ALLOC, 1: TUPLE, 2: GET, 3: TUPLE})
    # a tuple field that is no allocation, an index out of range, a non-builtin of the same name
    assert not _fresh([_alloc(1), Call(2, 1, (("r", 1), ("r", 0))), Ret(2)], {0: ALLOC, 1: TUPLE})
    bad = [_alloc(1), Call(2, 1, (("r", 1),)), Call(3, 2, (("r", 2), ("i", 1))), Call(4, 3, (("r", 3),)), Ret(4)]
    assert not _fresh(bad, {0: ALLOC, 1: TUPLE, 2: GET, 3: TUPLE})
    assert not _fresh([_alloc(1), Ret(1)], {})
    # a parameter register written by an allocation still holds the caller's array on some path
    assert not _fresh([_alloc(0), Ret(0)], {0: ALLOC})
    # every ret must qualify
    assert not _fresh([_alloc(1), Ret(1), Ret(0)], {0: ALLOC})


@pytest.mark.parametrize("level", [0, 2])
def test_a_model_of_fresh_outputs_skips_the_detacher(level, tmp_path):
    model = graph_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["x"], ["y"])], ["r", "y"])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
    assert vm._fresh[vm._index["main"]]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    first, second = vm.run({"x": x}), vm.run({"x": x})
    for out in (*first.values(), *second.values()):
        assert out.flags.writeable and not np.shares_memory(out, x)
    assert not np.shares_memory(first["r"], second["r"]) and not np.shares_memory(first["r"], first["y"])
    for name in ("identity", "input is output", "one value twice", "constant output"):
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(MODELS[name]), opt_level=level))
        assert not vm._fresh[vm._index["main"]], name


def test_zipmap_outputs_are_fresh_and_a_packed_kernel_of_another_name_is_not():
    from relaxpack.runtime.bytecode import Call, Ret
    zipmap = [_alloc(1), Call(2, 4, (("r", 1),)), Call(3, 1, (("r", 1), ("r", 2))), Ret(3)]
    assert _fresh(zipmap, {0: ALLOC, 1: "packed.ml.zip_map", 2: TUPLE})
    assert not _fresh(zipmap, {0: ALLOC, 1: "packed.ml.cast_map", 2: TUPLE})
    assert not _fresh(zipmap, {0: ALLOC, 1: "kernel.ml.zip_map", 2: TUPLE})


def test_a_zipmap_classifier_skips_the_detacher_and_gives_new_maps_each_run(tmp_path):
    from pathlib import Path
    zoo = Path(__file__).resolve().parents[1] / "models" / "zoo" / "sk_logistic_regression_zipmap.onnx"
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(str(zoo)), opt_level=2))
    assert vm._fresh[vm._index["main"]]
    name = vm._signatures["main"].names[0]
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(2, 10)
    first, second = vm.run({name: x}), vm.run({name: x})
    for key in first:
        a, b = first[key], second[key]
        if isinstance(a, np.ndarray):
            assert not np.shares_memory(a, b) and not np.shares_memory(a, x)
        else:
            assert a == b and all(m is not n for m, n in zip(a, b))
