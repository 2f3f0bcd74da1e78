"""The mutations of the malformed-model fuzzer.

A model mutation takes (model, rng, case), changes the model in place and
returns a description; a file mutation takes the serialized bytes and
returns new bytes. External-data mutations also write side files in the
case's model folder and mark the case when the data they point at leaves
that folder (the sentinel ``../secret.bin``).
"""

from __future__ import annotations

import os
import random

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

HUGE = 2 ** 40
INT_EDGES = (-1, 0, 1, 99, -99, 2 ** 31, -2 ** 31, 2 ** 63 - 1, -2 ** 63, HUGE)


def all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            for g in attr.graphs:
                yield from all_nodes(g)


def value_names(graph: onnx.GraphProto) -> list[str]:
    names = [i.name for i in graph.input] + [i.name for i in graph.initializer]
    for node in graph.node:
        names += [o for o in node.output if o]
    return names


# ---------------------------------------------------------------- attributes
def attr_type(model, rng: random.Random, case) -> str:
    nodes = [n for n in all_nodes(model.graph) if n.attribute]
    if not nodes:
        return ""
    node = rng.choice(nodes)
    attr = rng.choice(node.attribute)
    new = rng.choice([t for t in (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                                  AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.TENSOR,
                                  AttributeProto.GRAPH, AttributeProto.STRINGS) if t != attr.type])
    name = attr.name
    node.attribute.remove(attr)
    filler = {AttributeProto.INT: 3, AttributeProto.FLOAT: 2.5, AttributeProto.STRING: b"\xff\xfebad",
              AttributeProto.INTS: [1, 2, 3], AttributeProto.FLOATS: [0.5], AttributeProto.STRINGS: [b"x"],
              AttributeProto.TENSOR: numpy_helper.from_array(np.zeros(2, np.float32)),
              AttributeProto.GRAPH: helper.make_graph([], "empty", [], [])}[new]
    made = helper.make_attribute(name, filler)
    if rng.random() < 0.3:   # the type field says one thing, the payload another
        made.type = attr.type
    node.attribute.append(made)
    return f"{node.op_type}.{name}: {AttributeProto.AttributeType.Name(attr.type)} -> " \
           f"{AttributeProto.AttributeType.Name(made.type)}"


def attr_value(model, rng: random.Random, case) -> str:
    nodes = [n for n in all_nodes(model.graph) if n.attribute]
    if not nodes:
        return ""
    node = rng.choice(nodes)
    attr = rng.choice(node.attribute)
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(INT_EDGES)
        return f"{node.op_type}.{attr.name} = {attr.i}"
    if attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice((float("nan"), float("inf"), -1.0, 0.0, 1e30))
        return f"{node.op_type}.{attr.name} = {attr.f}"
    if attr.type == AttributeProto.INTS:
        values = [rng.choice(INT_EDGES) for _ in range(rng.choice((0, 1, len(attr.ints), 7)))]
        del attr.ints[:]
        attr.ints.extend(values)
        return f"{node.op_type}.{attr.name} = {values}"
    if attr.type == AttributeProto.STRING:
        attr.s = rng.choice((b"", b"NOT_A_MODE", b"\xff\xfe", b"SAME_UPPER" * 1000))
        return f"{node.op_type}.{attr.name} = {attr.s[:20]!r}"
    if attr.type == AttributeProto.TENSOR:
        attr.t.CopyFrom(rng.choice((TensorProto(), numpy_helper.from_array(np.zeros((0, 3), np.float32)),
                                    numpy_helper.from_array(np.array(["s"], dtype=object)))))
        return f"{node.op_type}.{attr.name} = odd tensor"
    if attr.type == AttributeProto.GRAPH:
        del attr.g.output[:]
        return f"{node.op_type}.{attr.name}: branch without outputs"
    return ""


def attr_drop_or_add(model, rng: random.Random, case) -> str:
    nodes = list(all_nodes(model.graph))
    if not nodes:
        return ""
    node = rng.choice(nodes)
    if node.attribute and rng.random() < 0.5:
        attr = rng.choice(node.attribute)
        node.attribute.remove(attr)
        return f"dropped {node.op_type}.{attr.name}"
    node.attribute.append(helper.make_attribute(rng.choice(("bogus", "axis", "perm", "to")), rng.choice((7, [9, 9]))))
    if len({a.name for a in node.attribute}) != len(node.attribute):
        return f"duplicate attribute on {node.op_type}"
    return f"extra attribute on {node.op_type}"


# ---------------------------------------------------------------- graph structure
def dangling_input(model, rng: random.Random, case) -> str:
    node = rng.choice([n for n in all_nodes(model.graph) if n.input] or [None])
    if node is None:
        return ""
    k = rng.randrange(len(node.input))
    node.input[k] = rng.choice(("nowhere", "", "  ", "x" * 5000))
    return f"{node.op_type} input {k} -> {node.input[k][:10]!r}"


def duplicate_output(model, rng: random.Random, case) -> str:
    nodes = list(model.graph.node)
    if len(nodes) < 2:
        return ""
    a, b = rng.sample(nodes, 2)
    target = rng.choice([b.output[0]] + [i.name for i in model.graph.input] + [i.name for i in model.graph.initializer])
    a.output[0] = target
    return f"{a.op_type} now also writes {target!r}"


def cycle(model, rng: random.Random, case) -> str:
    nodes = list(model.graph.node)
    if not nodes:
        return ""
    i = rng.randrange(len(nodes))
    j = rng.randrange(i, len(nodes))
    if not nodes[i].input:
        return ""
    nodes[i].input[rng.randrange(len(nodes[i].input))] = nodes[j].output[0]
    return f"node {i} ({nodes[i].op_type}) reads node {j}'s output (a cycle or a forward reference)"


def graph_outputs(model, rng: random.Random, case) -> str:
    if not model.graph.output:
        return ""
    choice = rng.randrange(4)
    if choice == 0:
        model.graph.output[0].name = "not_produced"
        return "graph output not produced"
    if choice == 1:
        del model.graph.output[:]
        return "no graph outputs"
    if choice == 2:
        model.graph.output.append(model.graph.output[0])
        return "graph output listed twice"
    del model.graph.node[:]
    return "no nodes"


def shuffle_nodes(model, rng: random.Random, case) -> str:
    nodes = list(model.graph.node)
    rng.shuffle(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return "nodes out of topological order"


# ---------------------------------------------------------------- types and shapes
def _dims_of(inp):
    return inp.type.tensor_type.shape.dim


def input_shape(model, rng: random.Random, case) -> str:
    inputs = [i for i in model.graph.input if i.type.HasField("tensor_type")]
    if not inputs:
        return ""
    inp = rng.choice(inputs)
    dims = _dims_of(inp)
    what = rng.randrange(7)
    if what == 0 and len(dims):
        d = rng.choice(dims)
        d.dim_value = rng.choice((HUGE, 2 ** 62, -5, -1, 0))
        return f"{inp.name} dim = {d.dim_value}"
    if what == 1:
        dims.add().dim_value = 3
        return f"{inp.name} gains a dim"
    if what == 2 and len(dims):
        del dims[-1]
        return f"{inp.name} loses a dim"
    if what == 3:
        inp.type.tensor_type.elem_type = rng.choice((0, 999, TensorProto.STRING, TensorProto.INT8,
                                                     TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN))
        return f"{inp.name} elem_type {inp.type.tensor_type.elem_type}"
    if what == 4 and len(dims):
        rng.choice(dims).dim_param = rng.choice(("", "n m", "1+1", "__import__('os')", "é", "x" * 3000, "-1"))
        return f"{inp.name} odd dim_param"
    if what == 5:
        for _ in range(100):
            dims.add().dim_value = 1
        return f"{inp.name} rank {len(dims)}"
    inp.type.ClearField("tensor_type")
    inp.type.sequence_type.elem_type.tensor_type.elem_type = TensorProto.FLOAT
    return f"{inp.name} is a sequence"


def initializer(model, rng: random.Random, case) -> str:
    inits = list(model.graph.initializer)
    if not inits:
        return ""
    t = rng.choice(inits)
    what = rng.randrange(7)
    if what == 0:
        t.dims.append(rng.choice((2, HUGE)))
        return f"{t.name} dims {list(t.dims)} without the data"
    if what == 1:
        del t.dims[:]
        t.dims.extend([rng.choice((-1, -7, HUGE, 2 ** 62))])
        return f"{t.name} dims {list(t.dims)}"
    if what == 2 and t.raw_data:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2 + 1]
        return f"{t.name} raw_data truncated"
    if what == 3:
        t.data_type = rng.choice((0, 999, TensorProto.STRING, TensorProto.INT64, TensorProto.BFLOAT16))
        return f"{t.name} data_type {t.data_type}"
    if what == 4:
        t.name = model.graph.input[0].name if model.graph.input else t.name
        return "initializer named like a graph input"
    if what == 5:
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), t.name))
        return f"two initializers named {t.name}"
    t.ClearField("raw_data")
    t.float_data.extend([1.0] * 3)
    return f"{t.name} float_data of the wrong length"


def huge_constant(model, rng: random.Random, case) -> str:
    """A tiny model asking for a huge tensor (constant folding must not allocate it)."""
    graph = model.graph
    if not graph.output:
        return ""
    out = graph.output[0].name
    shape = numpy_helper.from_array(np.array(rng.choice(([HUGE], [2 ** 20, 2 ** 20], [2 ** 31, 8], [-3, 4])),
                                             np.int64), "huge_shape")
    graph.initializer.append(shape)
    op = rng.choice(("ConstantOfShape", "Expand", "Tile", "Range", "Reshape", "Pad", "Resize"))
    if op == "ConstantOfShape":
        graph.node.append(helper.make_node("ConstantOfShape", ["huge_shape"], ["huge"]))
    elif op == "Expand":
        graph.initializer.append(numpy_helper.from_array(np.ones(1, np.float32), "one"))
        graph.node.append(helper.make_node("Expand", ["one", "huge_shape"], ["huge"]))
    elif op == "Tile":
        graph.initializer.append(numpy_helper.from_array(np.ones([1] * len(shape.dims) or [1], np.float32), "one"))
        reps = numpy_helper.to_array(shape).reshape(-1)
        graph.initializer.append(numpy_helper.from_array(np.abs(reps), "reps"))
        graph.node.append(helper.make_node("Tile", ["one", "reps"], ["huge"]))
    elif op == "Range":
        for n, v in (("r0", 0), ("r1", HUGE), ("r2", 1)):
            graph.initializer.append(numpy_helper.from_array(np.array(v, np.int64), n))
        graph.node.append(helper.make_node("Range", ["r0", "r1", "r2"], ["huge"]))
    elif op == "Reshape":
        graph.initializer.append(numpy_helper.from_array(np.ones(4, np.float32), "four"))
        graph.node.append(helper.make_node("Reshape", ["four", "huge_shape"], ["huge"]))
    elif op == "Pad":
        graph.initializer.append(numpy_helper.from_array(np.ones(2, np.float32), "two"))
        graph.initializer.append(numpy_helper.from_array(np.array([0, HUGE], np.int64), "pads"))
        graph.node.append(helper.make_node("Pad", ["two", "pads"], ["huge"]))
    else:
        graph.initializer.append(numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "img"))
        graph.initializer.append(numpy_helper.from_array(np.array([1, 1, 2 ** 20, 2 ** 20], np.float32), "scales"))
        graph.node.append(helper.make_node("Resize", ["img", "", "scales"], ["huge"]))
    graph.output.append(helper.make_tensor_value_info("huge", TensorProto.FLOAT, None))
    return f"{op} to {list(shape.dims)} {numpy_helper.to_array(shape).tolist()}"


def opset(model, rng: random.Random, case) -> str:
    what = rng.randrange(5)
    if what == 0:
        del model.opset_import[:]
        return "no opset_import"
    if what == 1 and model.opset_import:
        model.opset_import[0].version = rng.choice((0, -1, 1, 10000))
        return f"opset {model.opset_import[0].version}"
    nodes = list(all_nodes(model.graph))
    if what == 2 and nodes:
        node = rng.choice(nodes)
        node.domain = rng.choice(("com.evil", "ai.onnx.ml", "com.microsoft"))
        return f"{node.op_type} in domain {node.domain}"
    if what == 3 and nodes:
        node = rng.choice(nodes)
        node.op_type = rng.choice(("FooBar", "", "Conv ", "__init__"))
        return f"op_type {node.op_type!r}"
    model.ir_version = rng.choice((0, 1, 3, 1000))
    return f"ir_version {model.ir_version}"


def value_info(model, rng: random.Random, case) -> str:
    names = [o for n in model.graph.node for o in n.output if o]
    if not names:
        return ""
    name = rng.choice(names)
    model.graph.value_info.append(helper.make_tensor_value_info(
        name, rng.choice((TensorProto.INT8, TensorProto.FLOAT, TensorProto.STRING)),
        rng.choice(([1], [HUGE, 3], [-2], ["q", "r", "s", "t", "u", "v"]))))
    return f"contradicting value_info for {name}"


# ---------------------------------------------------------------- external data
def external_data(model, rng: random.Random, case) -> str:
    """An initializer's bytes moved to a file, with a location that may escape the folder."""
    inits = [t for t in model.graph.initializer if t.raw_data or t.float_data]
    if not inits:
        inits = list(model.graph.initializer)
    if not inits:
        return ""
    t = rng.choice(inits)
    try:
        payload = numpy_helper.to_array(t).tobytes()
    except Exception:   # an earlier mutation broke it: any bytes will do
        payload = bytes(16)
    folder = case.folder
    (folder / "weights.bin").write_bytes(payload)
    secret = case.root / "secret.bin"
    kind = rng.choice(("inside", "parent", "absolute", "dotdot_sub", "symlink_file", "symlink_dir", "fifo",
                       "directory", "dev", "offset", "huge_length", "missing", "empty", "nul"))
    location, escape = "weights.bin", False
    extra = {}
    if kind == "parent":
        location, escape = "../secret.bin", True
    elif kind == "absolute":
        location, escape = str(secret.resolve()), True
    elif kind == "dotdot_sub":
        (folder / "sub").mkdir(exist_ok=True)
        location, escape = "sub/../../secret.bin", True
    elif kind == "symlink_file":
        link = folder / "link.bin"
        if not link.exists():
            os.symlink(secret, link)
        location, escape = "link.bin", True
    elif kind == "symlink_dir":
        link = folder / "outside"
        if not link.exists():
            os.symlink(case.root, link)
        location, escape = "outside/secret.bin", True
    elif kind == "fifo":
        fifo = folder / "pipe.bin"
        if not fifo.exists():
            os.mkfifo(fifo)
        location = "pipe.bin"
    elif kind == "directory":
        (folder / "adir").mkdir(exist_ok=True)
        location = "adir"
    elif kind == "dev":
        location, escape = "/dev/zero", True
    elif kind == "offset":
        extra = {"offset": str(rng.choice((10 ** 9, -4, 3))), "length": str(len(payload))}
    elif kind == "huge_length":
        extra = {"length": str(rng.choice((HUGE, 2 ** 63 - 1)))}
    elif kind == "missing":
        location = "nothere.bin"
    elif kind == "empty":
        location = ""
    elif kind == "nul":
        location = "weights.bin\x00../../secret.bin"
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.ClearField("int64_data")
    t.ClearField("int32_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in {"location": location, **extra}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    if sum(i.name == t.name for i in model.graph.initializer) > 1:
        escape = False   # a duplicate name: the importer may read only the other tensor of that name
    case.escape = case.escape or escape
    return f"{t.name} external data {kind}: {location!r} {extra}"


# ---------------------------------------------------------------- files
def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))]


def bit_flips(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 4, 32))):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def garbage(data: bytes, rng: random.Random) -> bytes:
    return rng.choice((b"", b"\x00" * 100, b"not an onnx model", os.urandom(1000), b"\x08" + b"\xff" * 20))


MUTATIONS = {
    "attr_type": attr_type, "attr_value": attr_value, "attr_drop_or_add": attr_drop_or_add,
    "dangling_input": dangling_input, "duplicate_output": duplicate_output, "cycle": cycle,
    "graph_outputs": graph_outputs, "shuffle_nodes": shuffle_nodes, "input_shape": input_shape,
    "initializer": initializer, "huge_constant": huge_constant, "opset": opset, "value_info": value_info,
    "external_data": external_data,
}
FILE_MUTATIONS = {"truncate": truncate, "bit_flips": bit_flips, "garbage": garbage}
#: how often each is drawn
KINDS = [*MUTATIONS, "attr_value", "attr_value", "input_shape", "initializer", "external_data", "external_data",
         "huge_constant", *FILE_MUTATIONS]
