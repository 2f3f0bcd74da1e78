"""Hugging Face transformers from small configs with random weights (never from a hub).

Each model is wrapped so that the exporters see positional tensor inputs and
a tuple of tensor outputs (the model's own output fields, by name); the
model runs with its default attention implementation (sdpa), except one BERT
with eager attention, the path older exports took (the extended attention
mask broadcast against the scores).
"""

from __future__ import annotations

import torch
import transformers as tf

from .torch_export import TorchRecipe

VOCAB = 128
TEXT_EXPORT = {"batch": 2, "sequence": 7}
#: three values of each dim: 17 is no multiple of anything; 1 exercises size-1 broadcasting (and a
#: sequence of one token, as in generation)
TEXT_TESTS = [{"batch": 1, "sequence": 5}, {"batch": 3, "sequence": 17}, {"batch": 2, "sequence": 1}]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


class Wrap(torch.nn.Module):
    """``model(**dict(zip(arg_names, args)), **extra)`` returning the fields ``outputs``."""

    def __init__(self, model, arg_names, outputs, **extra):
        super().__init__()
        self.model, self.arg_names, self.outputs, self.extra = model, list(arg_names), list(outputs), extra

    def forward(self, *args):
        out = self.model(**dict(zip(self.arg_names, args)), **self.extra)
        return tuple(getattr(out, o) for o in self.outputs)


def tokens(name="input_ids", vocab=VOCAB, seq="sequence"):
    return {"name": name, "dtype": "int64", "shape": ["batch", seq], "values": "tokens", "high": vocab}


def mask(name="attention_mask", seq="sequence"):
    return {"name": name, "dtype": "int64", "shape": ["batch", seq], "values": "mask"}


def text(name, family, cls, config, outputs=("last_hidden_state",), inputs=None, **extra) -> TorchRecipe:
    """A text model on input_ids + attention_mask, dynamic batch and sequence."""
    inputs = inputs or [tokens(), mask()]
    return TorchRecipe(
        name, family, f"transformers.{cls.__name__}({type(config).__name__}: {describe(config)})",
        lambda: Wrap(cls(config), [s["name"] for s in inputs], outputs, **extra),
        inputs, list(outputs), TEXT_EXPORT, TEXT_TESTS)


def describe(config) -> str:
    keys = ["vocab_size", "hidden_size", "d_model", "num_hidden_layers", "num_layers", "num_attention_heads",
            "intermediate_size", "image_size", "patch_size", "hidden_sizes", "depths", "embed_dim"]
    return ", ".join(f"{k}={getattr(config, k)}" for k in keys if k in config.to_dict())


def decoder_recipes() -> list[TorchRecipe]:
    cache = {"use_cache": False}
    llama = dict(vocab_size=VOCAB, num_key_value_heads=1, max_position_embeddings=64, **SMALL)
    return [
        text("gpt2", "gpt2", tf.GPT2Model, tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2,
                                                          n_positions=64), **cache),
        text("gpt_neo", "gpt_neo", tf.GPTNeoModel,
             tf.GPTNeoConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                             attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=64),
             **cache),
        text("llama", "llama", tf.LlamaModel, tf.LlamaConfig(**llama), **cache),
        text("mistral", "mistral", tf.MistralModel, tf.MistralConfig(sliding_window=4, **llama), **cache),
        text("qwen2", "qwen2", tf.Qwen2Model, tf.Qwen2Config(**llama), **cache),
        text("phi", "phi", tf.PhiModel, tf.PhiConfig(partial_rotary_factor=0.5, vocab_size=VOCAB,
                                                     max_position_embeddings=64, **SMALL), **cache),
    ]


def encoder_recipes() -> list[TorchRecipe]:
    common = dict(vocab_size=VOCAB, max_position_embeddings=64, **SMALL)
    bert_inputs = [tokens(), mask(), tokens("token_type_ids", 2)]
    pooled = ("last_hidden_state", "pooler_output")
    return [
        text("bert", "bert", tf.BertModel, tf.BertConfig(**common), pooled, bert_inputs),
        text("bert_eager", "bert", tf.BertModel, tf.BertConfig(attn_implementation="eager", **common), pooled,
             bert_inputs),
        text("distilbert", "distilbert", tf.DistilBertModel,
             tf.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                 max_position_embeddings=64)),
        text("roberta", "roberta", tf.RobertaModel, tf.RobertaConfig(**{**common, "max_position_embeddings": 66}),
             pooled),
        text("albert", "albert", tf.AlbertModel, tf.AlbertConfig(embedding_size=16, **common), pooled),
        text("electra", "electra", tf.ElectraModel, tf.ElectraConfig(embedding_size=16, **common)),
        text("deberta_v2", "deberta_v2", tf.DebertaV2Model,
             tf.DebertaV2Config(relative_attention=True, position_buckets=16, max_relative_positions=64,
                                pos_att_type=["p2c", "c2p"], position_biased_input=False, **common)),
        text("clip_text", "clip", tf.CLIPTextModel,
             tf.CLIPTextConfig(vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=0, eos_token_id=2,
                               pad_token_id=1, **SMALL), pooled),
        text("t5_encoder", "t5", tf.T5EncoderModel,
             tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                         relative_attention_num_buckets=8)),
        # torch.export fails on sdpa's T5 (a view of a transposed output: t5_encoder_dynamo in
        # export_failures); with eager attention it exports, as a user of the dynamo exporter would
        dynamo_only(text("t5_encoder_eager", "t5", tf.T5EncoderModel,
                         tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                     relative_attention_num_buckets=8, attn_implementation="eager"))),
    ]


def dynamo_only(recipe: TorchRecipe) -> TorchRecipe:
    recipe.exporters = ("dynamo",)
    return recipe


def seq2seq_recipes() -> list[TorchRecipe]:
    t5 = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                     num_heads=2, relative_attention_num_buckets=8, decoder_start_token_id=0)
    dec_inputs = [tokens(seq="decoder_sequence"),
                  {"name": "encoder_hidden_states", "dtype": "float32", "shape": ["batch", "sequence", 32]},
                  mask("encoder_attention_mask")]
    dec_dims = [{"batch": 1, "sequence": 5, "decoder_sequence": 3}, {"batch": 3, "sequence": 17, "decoder_sequence": 6},
                {"batch": 2, "sequence": 9, "decoder_sequence": 1}]
    bart = tf.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                         decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    bart_inputs = [tokens(), mask(), tokens("decoder_input_ids", seq="decoder_sequence")]
    return [
        TorchRecipe("t5_decoder", "t5", "transformers.T5Model(T5Config: d_model=32, 2+2 layers).decoder",
                    lambda: Wrap(tf.T5Model(t5).decoder, [s["name"] for s in dec_inputs], ["last_hidden_state"],
                                 use_cache=False),
                    dec_inputs, ["last_hidden_state"], {"batch": 2, "sequence": 7, "decoder_sequence": 4}, dec_dims),
        TorchRecipe("bart", "bart", "transformers.BartModel(BartConfig: d_model=32, 2+2 layers)",
                    lambda: Wrap(tf.BartModel(bart), [s["name"] for s in bart_inputs],
                                 ["last_hidden_state", "encoder_last_hidden_state"], use_cache=False),
                    bart_inputs, ["last_hidden_state", "encoder_last_hidden_state"],
                    {"batch": 2, "sequence": 7, "decoder_sequence": 4}, dec_dims),
    ]


def pixels(height="height", width="width", channels=3):
    return {"name": "pixel_values", "dtype": "float32", "shape": ["batch", channels, height, width]}


def vision(name, family, cls, config, size=None, outputs=("last_hidden_state",), tests=None, fixed=None):
    """A vision model on pixel_values; dynamic height/width unless ``size`` fixes them (with ``fixed``'s reason)."""
    spec = pixels(size, size) if size else pixels()
    export_dims = {"batch": 2} if size else {"batch": 2, "height": 64, "width": 48}
    tests = tests or ([{"batch": 1}, {"batch": 3}] if size else
                      [{"batch": 1, "height": 61, "width": 96}, {"batch": 3, "height": 64, "width": 40}])
    return TorchRecipe(name, family, f"transformers.{cls.__name__}({type(config).__name__}: {describe(config)})",
                       lambda: Wrap(cls(config), ["pixel_values"], outputs), [spec], list(outputs), export_dims,
                       tests, fixed or {})


def vision_recipes() -> list[TorchRecipe]:
    vit = dict(image_size=32, patch_size=8, **SMALL)
    pos = {"height": "absolute position embeddings are sized for 32x32 images",
           "width": "absolute position embeddings are sized for 32x32 images"}
    pooled = ("last_hidden_state", "pooler_output")
    return [
        vision("vit", "vit", tf.ViTModel, tf.ViTConfig(**vit), 32, pooled, fixed=pos),
        vision("deit", "deit", tf.DeiTModel, tf.DeiTConfig(**vit), 32, pooled, fixed=pos),
        vision("clip_vision", "clip", tf.CLIPVisionModel, tf.CLIPVisionConfig(**vit), 32, pooled, fixed=pos),
        vision("swin", "swin", tf.SwinModel,
               tf.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                             window_size=4), outputs=pooled,
               tests=[{"batch": 1, "height": 30, "width": 45}, {"batch": 3, "height": 64, "width": 40}]),
        vision("convnext", "convnext", tf.ConvNextModel,
               tf.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2), outputs=pooled),
        # DETR's position embedding divides a cumsum by its last row (x / x[:, -1:]): a broadcast of
        # min(h, 1) rows against h, once assumed an equality that failed on every image
        vision("detr", "detr", tf.DetrModel,
               tf.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False,
                             backbone_config=tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48, 64],
                                                             depths=[1, 1, 1, 1], out_features=["stage4"]),
                             d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=5),
               outputs=("last_hidden_state",),
               tests=[{"batch": 1, "height": 64, "width": 64}, {"batch": 2, "height": 96, "width": 80}]),
        vision("segformer", "segformer", tf.SegformerForSemanticSegmentation,
               tf.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                  patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
                                  mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5), outputs=("logits",)),
    ]


def audio_recipes() -> list[TorchRecipe]:
    whisper = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
                               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                               decoder_ffn_dim=64, max_source_positions=16, max_target_positions=16,
                               pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    features = {"name": "input_features", "dtype": "float32", "shape": ["batch", 16, 32]}
    w2v = tf.Wav2Vec2Config(vocab_size=VOCAB, conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2),
                            num_feat_extract_layers=2, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                            **SMALL)
    wave = {"name": "input_values", "dtype": "float32", "shape": ["batch", "samples"]}
    # WavLM: wav2vec2's front end with a gated relative position bias, whose transposed products
    # onnxruntime's optimizer folds into FusedMatMul with transBatchB (wavlm_ortopt)
    wavlm = tf.WavLMConfig(vocab_size=VOCAB, conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2),
                           num_feat_extract_layers=2, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                           num_buckets=16, max_bucket_distance=32, **SMALL)
    return [
        TorchRecipe("whisper_encoder", "whisper",
                    "transformers.WhisperModel(WhisperConfig: d_model=32, 16 mel bins, 2 layers).encoder",
                    lambda: Wrap(tf.WhisperModel(whisper).encoder, ["input_features"], ["last_hidden_state"]),
                    [features], ["last_hidden_state"], {"batch": 2}, [{"batch": 1}, {"batch": 3}],
                    {"frames": "WhisperEncoder requires exactly 2 * max_source_positions (32) input frames"}),
        TorchRecipe("wav2vec2", "wav2vec2", f"transformers.Wav2Vec2Model(Wav2Vec2Config: {describe(w2v)})",
                    lambda: Wrap(tf.Wav2Vec2Model(w2v), ["input_values"], ["last_hidden_state"]),
                    [wave], ["last_hidden_state"], {"batch": 2, "samples": 400},
                    [{"batch": 1, "samples": 333}, {"batch": 3, "samples": 517}]),
        TorchRecipe("wavlm", "wavlm", f"transformers.WavLMModel(WavLMConfig: {describe(wavlm)})",
                    lambda: Wrap(tf.WavLMModel(wavlm), ["input_values"], ["last_hidden_state"]),
                    [wave], ["last_hidden_state"], {"batch": 2, "samples": 400},
                    [{"batch": 1, "samples": 333}, {"batch": 3, "samples": 517}]),
    ]


def hf_recipes() -> list[TorchRecipe]:
    return [*encoder_recipes(), *decoder_recipes(), *seq2seq_recipes(), *vision_recipes(), *audio_recipes()]
