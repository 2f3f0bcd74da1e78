"""Converter outputs: onnxruntime.quantization (QDQ, dynamic int8, int4 MatMulNBits), onnxconverter-common
float16, skl2onnx.

Quantized and float16 models are made from zoo exports (TorchScript), so they
inherit that model's inputs and test shapes. How each is judged (its
``judge``) is the test's business; the recipe records what the test needs:
the quantization step of every output of a QDQ model (the scale of the
DequantizeLinear that makes it).
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
from dataclasses import dataclass, field

import numpy as np
import onnx

from .generate import HERE, MANIFEST, seed_of
from .inputs import make_inputs
from .torch_export import one_line


def base_entry(name: str) -> dict:
    for entry in json.loads(MANIFEST.read_text())["models"]:
        if entry["name"] == name:
            return entry
    raise SystemExit(f"{name} is not in the manifest yet: generate it first (-k {name.rsplit('_', 1)[0]})")


@dataclass
class Converted:
    """``convert(base_path, out_path, base_entry)`` applied to the zoo model ``base``."""

    name: str
    base: str
    convert: object
    source: str
    judge: str
    extra: dict = field(default_factory=dict)

    def names(self):
        return [self.name]

    def make(self):
        base = base_entry(self.base)
        entry = copy.deepcopy(base)
        entry.pop("bytes", None)
        entry.update(name=self.name, file=f"{self.name}.onnx", exporter=self.source, judge=self.judge,
                     source=f"{self.base}.onnx ({base['exporter']})", **self.extra)
        out = HERE / entry["file"]
        try:
            self.convert(HERE / base["file"], out, entry)
            runs_in_onnxruntime(entry)
        except Exception as err:  # a converter's failure (or a model onnxruntime refuses) is recorded
            out.unlink(missing_ok=True)
            return [], [{"name": self.name, "exporter": self.source, "family": base["family"],
                         "error": one_line(err)}]
        if self.judge == "qdq-one-step":
            entry["output_steps"] = output_steps(onnx.load(str(out)))
        return [entry], []


def runs_in_onnxruntime(entry: dict) -> None:
    """Raise unless onnxruntime (its optimizer off, as QDQ models are judged) loads the converted
    model and runs it at every test shape: the converters have no eager model to compare with."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(HERE / entry["file"]), options, providers=["CPUExecutionProvider"])
    for dims in entry["shapes"]:
        session.run(None, make_inputs(entry, dims))


class Calibration:
    """onnxruntime.quantization's CalibrationDataReader over the base model's test shapes."""

    def __init__(self, entry, seeds=4):
        self.feeds = iter([make_inputs(entry, dims, seed) for dims in entry["shapes"] for seed in range(seeds)])

    def get_next(self):
        return next(self.feeds, None)


def quantize_static(per_channel: bool, activation="QInt8", qoperator=False):
    """QDQ, or with ``qoperator`` the QOperator format (QLinearConv, QGemm, com.microsoft QLinear*)
    with uint8 activations and 7-bit int8 weights (``reduce_range``): onnxruntime runs those ops
    as integer kernels even with its optimizer off, and 7-bit weights keep its u8 x s8 GEMM from
    saturating int16 pairs on CPUs without VNNI (checked: ``weights_cannot_saturate``)."""
    def convert(src, dst, entry):
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static as quantize
        from onnxruntime.quantization.shape_inference import quant_pre_process
        prepared = dst.with_suffix(".prep.onnx")
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):  # its temporary files go there
            try:
                try:
                    quant_pre_process(str(src), str(prepared))
                except Exception as err:  # onnxruntime's symbolic shape inference gives up on some exports
                    if "symbolic shape inference" not in str(err):
                        raise
                    entry["exporter"] += f" (skip_symbolic_shape=True: without it, {err})"
                    quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
                if qoperator:
                    onnx.save(untie_initializers(onnx.load(str(prepared))), str(prepared))
                quantize(str(prepared), str(dst), Calibration(entry),
                         quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                         per_channel=per_channel, activation_type=getattr(QuantType, activation),
                         weight_type=QuantType.QInt8, reduce_range=qoperator)
            finally:
                prepared.unlink(missing_ok=True)
        if qoperator:
            weights_cannot_saturate(onnx.load(str(dst)))
    return convert


def untie_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """One copy of an initializer per node that reads it. The TorchScript exporter shares equal
    initializers (BERT's zero biases); quantize_static's QOperator format then quantizes the shared
    tensor once for its first use and gives the same quantized tensor to every other use, e.g. a
    uint8 activation where QGemm needs an int32 bias, a model onnxruntime refuses to load."""
    inits = {i.name: i for i in model.graph.initializer}
    seen: dict[str, int] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name not in inits:
                continue
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                copy = onnx.TensorProto()
                copy.CopyFrom(inits[name])
                copy.name = f"{name}_use{seen[name]}"
                model.graph.initializer.append(copy)
                node.input[k] = copy.name
    return model


def weights_cannot_saturate(model: onnx.ModelProto) -> None:
    """Raise unless every int8 weight of the integer GEMMs (QLinearConv, QGemm, QLinearMatMul) is in
    [-64, 64] (reduce_range's int8 range): two uint8 x int8 products then stay within int16
    (2 * 255 * 64 <= 32767)."""
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    weight_input = {"QLinearConv": 3, "QGemm": 3, "QLinearMatMul": 3}
    for node in model.graph.node:
        index = weight_input.get(node.op_type)
        weight = inits.get(node.input[index]) if index is not None else None
        if weight is not None and weight.dtype == np.int8 and np.abs(weight.astype(np.int32)).max(initial=0) > 64:
            raise ValueError(f"{node.op_type} {node.name!r}: int8 weights beyond 7 bits could saturate "
                             f"onnxruntime's u8 x s8 GEMM on CPUs without VNNI")


def ort_optimized(src, dst, entry):
    """The graph onnxruntime's optimizer makes at ORT_ENABLE_EXTENDED (its contrib fusions:
    FusedConv, FusedGemm, ...), as ``SessionOptions.optimized_model_filepath`` saves it."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])


def quantize_dynamic(src, dst, entry):
    from onnxruntime.quantization import QuantType, quantize_dynamic as quantize
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        quantize(str(src), str(dst), weight_type=QuantType.QInt8)


def matmul_nbits(block_size: int):
    def convert(src, dst, entry):
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=block_size, is_symmetric=False)
        quantizer.process()
        quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return convert


def float16(keep_io_types: bool):
    def convert(src, dst, entry):
        from onnxconverter_common import float16 as f16
        model = f16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=keep_io_types)
        onnx.save(model, str(dst))
        if not keep_io_types:
            for spec in entry["inputs"]:
                if spec["dtype"] == "float32":
                    spec["dtype"] = "float16"
    return convert


#: ops that never increase a difference between their inputs (1-Lipschitz, elementwise or moving values)
NON_EXPANDING = {"Tanh", "Relu", "Sigmoid", "Identity", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                 "Gather", "Slice", "Concat", "MaxPool", "GlobalAveragePool", "AveragePool"}


def output_steps(model: onnx.ModelProto) -> dict[str, float]:
    """For each graph output: the largest scale of the DequantizeLinears it is made from through ops
    that cannot widen a difference (``NON_EXPANDING``), so one step there is at most that at the output."""
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}

    def step(value):
        node = producers.get(value)
        if node is None:
            raise SystemExit(f"output path reaches {value!r} without a DequantizeLinear")
        if node.op_type == "DequantizeLinear":
            return float(np.max(inits[node.input[1]]))
        if node.op_type not in NON_EXPANDING:
            raise SystemExit(f"{node.op_type} node {node.name!r} between a DequantizeLinear and an output")
        moved = node.input[:1] if node.op_type in {"Gather", "Slice", "Reshape"} else node.input
        return max(step(v) for v in moved if v and v not in inits)

    return {out.name: step(out.name) for out in model.graph.output}


def quantization_recipes() -> list[Converted]:
    qdq = "onnxruntime.quantization.quantize_static(QDQ, {}, activations {}, weights QInt8, MinMax calibration " \
          "on the test shapes), after quant_pre_process"
    qop = "onnxruntime.quantization.quantize_static(QOperator, {}, activations QUInt8, weights QInt8 with " \
          "reduce_range (7 bits), MinMax calibration on the test shapes), after quant_pre_process"
    dyn = "onnxruntime.quantization.quantize_dynamic(weights QInt8): DynamicQuantizeLinear + MatMulInteger/ConvInteger"
    return [
        Converted("resnet_qdq_tensor", "resnet_ts", quantize_static(False), qdq.format("per-tensor", "QInt8"),
                  "qdq-one-step"),
        Converted("resnet_qdq_tensor_u8", "resnet_ts", quantize_static(False, "QUInt8"),
                  qdq.format("per-tensor", "QUInt8"), "qdq-one-step"),
        Converted("resnet_qdq_channel", "resnet_ts", quantize_static(True), qdq.format("per-channel", "QInt8"),
                  "qdq-one-step"),
        Converted("mobilenet_v2_qdq_tensor", "mobilenet_v2_ts", quantize_static(False),
                  qdq.format("per-tensor", "QInt8"), "qdq-one-step"),
        Converted("mobilenet_v2_qdq_channel", "mobilenet_v2_ts", quantize_static(True),
                  qdq.format("per-channel", "QInt8"), "qdq-one-step"),
        Converted("bert_qdq_tensor", "bert_ts", quantize_static(False), qdq.format("per-tensor", "QInt8"),
                  "qdq-one-step"),
        Converted("resnet_qop_tensor", "resnet_ts", quantize_static(False, "QUInt8", qoperator=True),
                  qop.format("per-tensor"), "qdq-one-step"),
        Converted("mobilenet_v2_qop_channel", "mobilenet_v2_ts", quantize_static(True, "QUInt8", qoperator=True),
                  qop.format("per-channel"), "qdq-one-step"),
        Converted("efficientnet_qop_tensor", "efficientnet_ts", quantize_static(False, "QUInt8", qoperator=True),
                  qop.format("per-tensor"), "qdq-one-step"),
        Converted("bert_qop_tensor", "bert_ts", quantize_static(False, "QUInt8", qoperator=True),
                  qop.format("per-tensor") + "; shared initializers untied first", "qoperator-float"),
        Converted("bert_dynamic_int8", "bert_ts", quantize_dynamic, dyn, "reference"),
        Converted("gpt2_dynamic_int8", "gpt2_ts", quantize_dynamic, dyn, "reference"),
        Converted("resnet_dynamic_int8", "resnet_ts", quantize_dynamic, dyn, "reference"),
        # int4 weights, float activations (accuracy_level 0): onnxruntime computes in float32
        Converted("llama_kv_int4", "llama_kv_ts", matmul_nbits(16),
                  "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer(4 bits, block 16, asymmetric): "
                  "com.microsoft MatMulNBits", "float32"),
    ]


def float16_recipes() -> list[Converted]:
    how = "onnxconverter_common.float16.convert_float_to_float16(keep_io_types={})"
    return [
        Converted("resnet_fp16", "resnet_ts", float16(False), how.format(False), "float16"),
        Converted("bert_fp16", "bert_ts", float16(True), how.format(True), "float16"),
        Converted("convnext_fp16", "convnext_ts", float16(False), how.format(False), "float16"),
        Converted("gpt2_fp16", "gpt2_ts", float16(True), how.format(True), "float16"),
        Converted("gpt2_dynamo_fp16", "gpt2_dynamo", float16(True), how.format(True), "float16"),
        Converted("bert_dynamo_fp16", "bert_dynamo", float16(True), how.format(True), "float16"),
        Converted("vit_fp16", "vit_ts", float16(False), how.format(False), "float16"),
    ]


@dataclass
class Sklearn:
    """A scikit-learn estimator fitted on seeded synthetic data, converted by skl2onnx."""

    name: str
    make_estimator: object
    task: str = "classification"
    features: int = 10

    def names(self):
        return [self.name]

    def make(self):
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
        from sklearn.datasets import make_classification, make_regression
        seed = seed_of(self.name) % 2**31
        if self.task == "classification":
            x, y = make_classification(400, self.features, n_informative=6, n_classes=3, random_state=seed)
        else:
            x, y = make_regression(400, self.features, n_informative=6, random_state=seed)
        estimator = self.make_estimator(seed).fit(x.astype(np.float32), y)
        options = {id(estimator): {"zipmap": False}} if self.task == "classification" else None
        model = to_onnx(estimator, initial_types=[("input", FloatTensorType([None, self.features]))],
                        options=options, target_opset={"": 17, "ai.onnx.ml": 3})
        onnx.save(model, str(HERE / f"{self.name}.onnx"))
        outputs = [o.name for o in model.graph.output]
        return [{"name": self.name, "file": f"{self.name}.onnx", "family": "sklearn",
                 "source": f"scikit-learn {type(estimator).__name__} on make_{self.task}(400 x {self.features})",
                 "exporter": "skl2onnx.to_onnx (zipmap=False, opset 17, ai.onnx.ml 3)",
                 "inputs": [{"name": "input", "dtype": "float32", "shape": ["batch", self.features]}],
                 "outputs": outputs, "dynamic_dims": ["batch"], "fixed_dims": {},
                 "shapes": [{"batch": 1}, {"batch": 7}, {"batch": 64}], "judge": "float32"}], []


@dataclass
class SklearnZipMap:
    """A scikit-learn classifier converted at skl2onnx's default options: its probabilities leave
    through a ZipMap, one ``{label: probability}`` dict per sample. With ``dict_input`` it is a
    DictVectorizer pipeline fed one dict of named features per run (a map input; its entries,
    ``present``, are the dynamic dim)."""

    name: str
    make_estimator: object
    dict_input: bool = False
    features: int = 10

    def names(self):
        return [self.name]

    def make(self):
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
        from sklearn.datasets import make_classification
        from sklearn.feature_extraction import DictVectorizer
        from sklearn.pipeline import make_pipeline
        seed = seed_of(self.name) % 2**31
        x, y = make_classification(400, self.features, n_informative=6, n_classes=3, random_state=seed)
        opsets = {"": 17, "ai.onnx.ml": 3}
        if self.dict_input:
            keys = [f"f{i}" for i in range(self.features)]
            rows = [{k: float(v) for k, v in zip(keys, row) if v > -1.0} for row in x]   # sparse dicts
            estimator = make_pipeline(DictVectorizer(sparse=False), self.make_estimator(seed)).fit(rows, y)
            types = [("input", DictionaryType(StringTensorType([1]), FloatTensorType([1])))]
            inputs = [{"name": "input", "kind": "map", "key_dtype": "string", "dtype": "float32", "keys": keys,
                       "shape": ["present"]}]
            dims, shapes = ["present"], [{"present": 1}, {"present": 4}, {"present": self.features}]
        else:
            estimator = self.make_estimator(seed).fit(x.astype(np.float32), y)
            types = [("input", FloatTensorType([None, self.features]))]
            inputs = [{"name": "input", "dtype": "float32", "shape": ["batch", self.features]}]
            dims, shapes = ["batch"], [{"batch": 1}, {"batch": 7}, {"batch": 64}]
        model = convert_sklearn(estimator, initial_types=types, target_opset=opsets)
        onnx.save(model, str(HERE / f"{self.name}.onnx"))
        steps = [step for _, step in estimator.steps] if hasattr(estimator, "steps") else [estimator]
        what = " + ".join(type(step).__name__ for step in steps)
        outputs = [o.name for o in model.graph.output]
        return [{"name": self.name, "file": f"{self.name}.onnx", "family": "sklearn",
                 "source": f"scikit-learn {what} on make_classification(400 x {self.features})"
                           + (", rows as dicts of the features above -1" if self.dict_input else ""),
                 "exporter": "skl2onnx.convert_sklearn, default options (ZipMap output; opset 17, ai.onnx.ml 3)",
                 "inputs": inputs, "outputs": outputs, "dynamic_dims": dims, "fixed_dims": {}, "shapes": shapes,
                 "judge": "float32"}], []


def sklearn_recipes() -> list:
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return [
        Sklearn("sk_logistic_regression", lambda s: LogisticRegression(max_iter=500)),
        Sklearn("sk_random_forest", lambda s: RandomForestClassifier(12, max_depth=6, random_state=s)),
        Sklearn("sk_gradient_boosting", lambda s: GradientBoostingClassifier(n_estimators=10, max_depth=3,
                                                                             random_state=s)),
        Sklearn("sk_gradient_boosting_regressor", lambda s: GradientBoostingRegressor(n_estimators=20, max_depth=3,
                                                                                      random_state=s), "regression"),
        Sklearn("sk_scaler_pca_mlp", lambda s: make_pipeline(StandardScaler(), PCA(5, random_state=s),
                                                             MLPClassifier((16,), max_iter=300, random_state=s))),
        SklearnZipMap("sk_logistic_regression_zipmap", lambda s: LogisticRegression(max_iter=500)),
        SklearnZipMap("sk_dict_vectorizer_forest_zipmap",
                      lambda s: RandomForestClassifier(8, max_depth=5, random_state=s), dict_input=True),
    ]


def ort_optimized_recipes() -> list[Converted]:
    how = "onnxruntime.InferenceSession(ORT_ENABLE_EXTENDED, optimized_model_filepath): its fused contrib ops"
    return [
        Converted("resnet_ortopt", "resnet_ts", ort_optimized, how, "float32"),
        Converted("efficientnet_ortopt", "efficientnet_ts", ort_optimized, how, "float32"),
        # FusedMatMul with transBatchB (the relative position bias's transposed products)
        Converted("wavlm_ortopt", "wavlm_ts", ort_optimized, how, "float32"),
    ]


def converted_recipes() -> list:
    return [*quantization_recipes(), *ort_optimized_recipes(), *float16_recipes(), *sklearn_recipes()]
