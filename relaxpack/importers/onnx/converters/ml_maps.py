"""ai.onnx.ml's map ops: ZipMap (a sequence of maps out), CastMap and DictVectorizer (a map in).

A map is ``R.Map(key_dtype, R.Tensor((), value_dtype))`` in the IR and a
Python dict at run time (runtime/maps.py). Each op is a ``call_packed`` of
its kernel (runtime/kernels/ml_maps.py, which follows onnxruntime) with the
struct info its op infers (ops/definitions/ml_maps.py); a tensor result is
bound to its dims by a ``match_cast``::

    ZipMap(p: (n, 3))           ->  R.call_packed("ml.zip_map", p, kernel_attrs=(("labels", (0, 1, 2)),),
                                                  sinfo_args=R.Sequence(R.Map("int64", R.Tensor((), "float32"))))
    DictVectorizer(m: map(string, float))  ->  (1, len(vocabulary)) float32

skl2onnx ends every classifier in a ZipMap by default (its probabilities as
one ``{label: probability}`` dict per sample), and a DictVectorizer starts a
pipeline fed with dicts.
"""

from __future__ import annotations

from ....ir.expr import ExternFunc
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import shape_error
from .ml import ML, class_labels, required


def _inferred(ctx, op: str, x: Value, **attrs):
    """The struct info of ``op`` on ``x`` (its inference checks the operand and the attributes)."""
    return ctx.bb.infer_call(make_call(op, ctx.expr(x), **attrs))


@register_converter(ML, "ZipMap", since_opset=1)
def zip_map(ctx, x, *, classlabels_int64s=None, classlabels_strings=None):
    labels = tuple(class_labels(ctx, classlabels_int64s, classlabels_strings).tolist())
    x = required(ctx, x)
    sinfo = _inferred(ctx, "ml.zip_map", x, labels=labels)
    call = make_call("call_packed", ExternFunc("ml.zip_map"), ctx.expr(x), sinfo_args=(sinfo,),
                     kernel_attrs=(("labels", labels),))
    return Value(sinfo, expr=ctx.bb.emit(call, "zipmap"))


@register_converter(ML, "CastMap", since_opset=1)
def cast_map(ctx, x, *, cast_to="TO_FLOAT", map_form="DENSE", max_map=1):
    if map_form == "SPARSE" and max_map < 1:
        raise shape_error(ctx, f"max_map must be positive for SPARSE, got {max_map}")
    attrs = {"cast_to": cast_to, "map_form": map_form, "max_map": int(max_map)}
    sinfo = _inferred(ctx, "ml.cast_map", required(ctx, x), **attrs)
    shape = sinfo.shape or (1, None)        # DENSE: one value per key, known at run time
    return packed_call(ctx, "ml.cast_map", [x], [(shape, sinfo.dtype)], "castmap", **attrs)


@register_converter(ML, "DictVectorizer", since_opset=1)
def dict_vectorizer(ctx, x, *, int64_vocabulary=None, string_vocabulary=None):
    if (int64_vocabulary is None) == (string_vocabulary is None):
        raise shape_error(ctx, "needs exactly one of int64_vocabulary and string_vocabulary")
    vocabulary = tuple(int(v) for v in int64_vocabulary) if int64_vocabulary is not None \
        else tuple(s.decode() if isinstance(s, bytes) else s for s in string_vocabulary)
    x = required(ctx, x)
    dtype = getattr(getattr(x.sinfo, "value", None), "dtype", None)
    sinfo = _inferred(ctx, "ml.dict_vectorizer", x, vocabulary=vocabulary, dtype=dtype)
    if x.const is not None:
        return packed_call(ctx, "ml.dict_vectorizer", [x], [(sinfo.shape, sinfo.dtype)], "dictvec",
                           vocabulary=vocabulary, dtype=dtype)
    # the kernel's result is (1, len(vocabulary)) of the op's dtype by construction: declared so
    # on the call, with no match_cast to check it every run (~1 us of a small model's call)
    call = make_call("call_packed", ExternFunc("ml.dict_vectorizer"), ctx.expr(x), sinfo_args=(sinfo,),
                     kernel_attrs=(("dtype", dtype), ("vocabulary", vocabulary)))
    return Value(sinfo, expr=ctx.bb.emit(call, "dictvec"))
