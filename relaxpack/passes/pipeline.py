"""The pipelines ``build`` runs: optimize (by opt level), then lower.

>>> with PassContext(opt_level=2):                                       # doctest: +SKIP
...     lowered = lower_pipeline()(optimize_pipeline()(mod))

The core optimization passes (:func:`core_passes`), in the order of one round:

- CanonicalizeBindings first, so the other passes see values, not aliases;
- FoldConstant evaluates what is constant;
- SimplifyShapes decides shape arithmetic and casts with the dim ranges
  (after folding, which may have made dims static);
- EliminateCommonSubexpr merges what is now the same (it leaves aliases);
- CanonicalizeBindings removes those aliases and the redundant tuples;
- DeadCodeElimination drops everything the rewrites left unused.

One round reaches a fixed point on the models in tests/ (a second round
changes nothing); the pipeline may repeat it for IR from other sources.
"""

from __future__ import annotations

from .canonicalize_bindings import canonicalize_bindings
from .concat_of_split import concat_of_split_pass
from .conv1d_channels_last import conv1d_channels_last
from .depthwise_tokens_channels_last import depthwise_tokens_channels_last_pass
from .merge_quantized_products import merge_quantized_products
from .convert_layout import convert_layout
from .core.infra import Pass, Sequential
from .dead_code_elimination import dead_code_elimination
from .drop_nan_saturation import drop_nan_saturation
from .drop_zero_sign_round_trips import drop_zero_sign_round_trips
from .hoist_max_pool import hoist_max_pool
from .eliminate_common_subexpr import eliminate_common_subexpr
from .exact_integer_matmul import exact_integer_matmul
from .fold_activation_scales import fold_activation_scales
from .fold_batch_norm import fold_batch_norm, scale_shift_batch_norm
from .fold_constant import fold_constant
from .fold_permute_matmul import fold_permute_matmul
from .fuse_classifier_normalizer import fuse_classifier_normalizer
from .fuse_bias_activation import fuse_bias_activation
from .fuse_dynamic_quantize import fuse_dynamic_quantize
from .fuse_ops import fuse_ops
from .fuse_attention import fuse_attention
from .fuse_rms_norm import fuse_rms_norm
from .fuse_rotate_half import fuse_rotate_half
from .fuse_squeeze_excite import fuse_squeeze_excite
from .legalize import legalize
from .lower_fused import lower_fused_functions
from .merge_projections import merge_projections
from .narrow_index_casts import narrow_index_casts
from .pack_recurrent_weights import pack_recurrent_weights
from .plan_memory import plan_memory
from .reorder_bindings import reorder_bindings
from .round_float16_in_float32 import round_float16_in_float32
from .share_look_ups import share_look_ups
from .simplify_algebra import simplify_algebra
from .simplify_shapes import simplify_shapes
from .sink_resize import sink_resize
from .tabulate_integer_functions import tabulate_integer_functions
from .widen_float16_regions import widen_float16_regions
from .widen_look_up_tables import widen_look_up_tables


def core_passes() -> list[Pass]:
    """The core optimization passes (opt level 1) for one round, in order."""
    return [
        canonicalize_bindings,
        fold_constant,
        simplify_shapes,
        eliminate_common_subexpr,
        canonicalize_bindings,
        dead_code_elimination,
    ]


def optimize_pipeline() -> Sequential:
    """What ``build`` runs before lowering; the PassContext's opt level
    decides what runs (each pass's own level, and the -O2 group's):

    - 0: nothing (the module is only legalized);
    - 1: one round of the core passes;
    - 2: the core passes, then ExactIntegerMatmul (integer matmuls whose sums the operands' and dims'
      bounds keep within float32's exact integers, in float32), the algebraic rewrites (batch norm folded into
      weights, the others split into a scale and shift, layout and identity simplification, the RMS
      normalization chain into one nn.rms_norm, rotary embeddings' rotate_half into one op),
      WidenFloat16Regions (float16 values between two ops computed in float32 stay float32, as
      onnxruntime keeps them; after the compositions, which read the float16 ops), MergeProjections
      (sibling products of one input by constant weights, attention's q/k/v, in one batched matmul
      whose parts are views), bias and
      activation fused into gemm / conv kernels, DepthwiseTokensChannelsLast (a depthwise conv between
      token-major transposes, a Mix-FFN's, runs channels last on the tokens; before FoldPermuteMatmul
      takes the transposes into the products), FoldPermuteMatmul (transposes of a matmul's operands
      and result read as strided views), SinkResize (1x1 convs of resized images before the resize),
      ConvertLayout (convolutional regions run
      channels last; after the fusions, whose rules read channels first), Conv1dChannelsLast (a 1-d
      conv whose result is only transposed to (N, L, C) writes it so),
      SimplifyAlgebra again (the transposes out of channels last fold into
      the layout chains after them), ConcatOfSplit (a concat of all of a split's pieces reads
      the split's input; a split read through one piece is a slice), FuseSqueezeExcite (channels-last SE blocks
      in one kernel), FoldActivationScales (HardSigmoid's factors and HardSwish's 1/6 into constant
      weights: float rewrites), DropZeroSignRoundTrips (quantized values' casts to their
      integer type and back where only a zero's sign would change and nothing reads it),
      PackRecurrentWeights (constant LSTM/GRU/RNN weights in the layout
      their kernels read), FuseClassifierNormalizer (a Normalizer of a linear classifier's
      scores as the classifier's ``norm``), RoundFloat16InFloat32 (a float16 rounding every reader widens again
      kept in float32 by ``round_to_float16``; after CanonicalizeBindings and DeadCodeElimination:
      it reads readers through no aliases, and no dead tuple of a split's pieces), another core
      round to clean up, HoistMaxPool (a max pool of a monotone
      requantization chain pools the chain's input), TabulateIntegerFunctions
      (elementwise chains of a quantized value become table look-ups, on folded
      constants), FuseDynamicQuantize (a DynamicQuantizeLinear an integer product reads in
      one kernel; DeadCodeElimination drops the chains of both), MergeQuantizedProducts (its
      sibling exact integer products and their scalings in one batched product), ShareLookUps (a look-up another one's
      result gives by a cast and a shift), WidenLookUpTables (a look-up index's clip taken into
      a table covering the index's bounded range), NarrowIndexCasts (a look-up index's
      float-to-int64 cast through int32), DropNaNSaturation (a quantizer's
      NaN-saturating clip of a value known finite clips only), FuseAttention (attention's
      products, scale, mask and softmax in one nn.attention, by blocks of query rows when its
      scores are large), and FuseOps last (elementwise groups become fused primitive functions).
    """
    o2 = Sequential([exact_integer_matmul, fold_batch_norm, scale_shift_batch_norm, simplify_algebra, fuse_rms_norm, fuse_rotate_half,
                     widen_float16_regions, merge_projections, fuse_bias_activation,
                     depthwise_tokens_channels_last_pass, fold_permute_matmul, sink_resize,
                     convert_layout, conv1d_channels_last, simplify_algebra, concat_of_split_pass, fuse_squeeze_excite,
                     fold_activation_scales,
                     drop_zero_sign_round_trips, pack_recurrent_weights, fuse_classifier_normalizer,
                     canonicalize_bindings, dead_code_elimination, round_float16_in_float32, *core_passes(),
                     hoist_max_pool,
                     tabulate_integer_functions,
                     fuse_dynamic_quantize, dead_code_elimination, merge_quantized_products, share_look_ups, widen_look_up_tables,
                     narrow_index_casts, drop_nan_saturation, fuse_attention, dead_code_elimination, fuse_ops],
                    name="O2", opt_level=2)
    return Sequential([*core_passes(), o2], name="Optimize")


def lower_pipeline() -> Sequential:
    """Graph ops to kernel calls, the order of lowest peak memory (ReorderBindings after
    fusion and legalization, which move bindings), then PlanMemory on that order."""
    return Sequential([lower_fused_functions, legalize, reorder_bindings, plan_memory], name="Lower")


__all__ = ["core_passes", "lower_pipeline", "optimize_pipeline"]
