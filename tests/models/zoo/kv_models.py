"""Decoders with a KV cache, as generation exports them: past keys and values in, present out.

A decoder-only model (GPT-2, Llama, Qwen2) takes ``input_ids`` (the new
tokens), an ``attention_mask`` over past and new tokens, Llama and Qwen2 also
``position_ids`` (past_sequence + 0, 1, ...), and per layer
``past_key_values.{i}.key/value`` (batch, kv heads, past_sequence, head dim);
it returns ``logits`` and ``present.{i}.key/value`` (past and new). A seq2seq
decoder (T5, Whisper, BART) takes, as optimum's decoder-with-past does, its
self-attention past and the cross-attention keys and values (computed once
from the encoder's output, then reused: the encoder's output itself is no
input) and returns ``last_hidden_state`` and the self-attention presents.

Past lengths tested: 0 (the first step: empty past tensors), 1 and 5 (odd),
with one new token (a generation step) and several (a prompt after a prefix).
"""

from __future__ import annotations

import torch
import transformers as tf

from .hf_models import SMALL, VOCAB, dynamo_only, tokens
from .torch_export import TorchRecipe

#: batch, new tokens, past tokens; total_sequence is past + new (the mask's and the presents' length)
KV_EXPORT = {"batch": 2, "sequence": 3, "past_sequence": 4, "encoder_sequence": 6}
KV_TESTS = [{"batch": 1, "sequence": 1, "past_sequence": 0, "encoder_sequence": 5},
            {"batch": 2, "sequence": 1, "past_sequence": 1, "encoder_sequence": 7},
            {"batch": 3, "sequence": 4, "past_sequence": 5, "encoder_sequence": 3},
            {"batch": 1, "sequence": 5, "past_sequence": 0, "encoder_sequence": 5}]


def with_total(dims: dict) -> dict:
    return {**dims, "total_sequence": dims["past_sequence"] + dims["sequence"]}


class CausalLMWithPast(torch.nn.Module):
    """``(input_ids, attention_mask, [position_ids], *past) -> (logits, *present)`` with a DynamicCache."""

    def __init__(self, model, layers: int, positions: bool):
        super().__init__()
        self.model, self.layers, self.positions = model, layers, positions

    def forward(self, *args):
        ids, mask = args[:2]
        extra = {"position_ids": args[2]} if self.positions else {}
        past = args[3:] if self.positions else args[2:]
        cache = tf.DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)], config=self.model.config)
        out = self.model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True, **extra)
        return (out.logits, *flat_layers(out.past_key_values))


class DecoderWithPast(torch.nn.Module):
    """``(input_ids, *self_past, *cross_past) -> (last_hidden_state, *present)`` with an
    EncoderDecoderCache whose cross-attention part is filled, so it is reused, not recomputed: the
    decoder sees the encoder's output only for its shape (zeros of the cross keys' length)."""

    def __init__(self, decoder, layers: int, d_model: int):
        super().__init__()
        self.decoder, self.layers, self.d_model = decoder, layers, d_model

    def forward(self, *args):
        ids = args[0]
        past, cross = args[1:1 + 2 * self.layers], args[1 + 2 * self.layers:]
        encoder_states = cross[0].new_zeros(cross[0].shape[0], cross[0].shape[2], self.d_model)
        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(self.layers)]
        cross_pairs = [(cross[2 * i], cross[2 * i + 1]) for i in range(self.layers)]
        cache = tf.EncoderDecoderCache(tf.DynamicCache(pairs), tf.DynamicCache(cross_pairs))
        out = self.decoder(input_ids=ids, encoder_hidden_states=encoder_states, cache=cache, use_cache=True)
        return (out.last_hidden_state, *flat_layers(out.past_key_values.self_attention_cache))


def flat_layers(cache) -> list[torch.Tensor]:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def kv_specs(prefix: str, layers: int, heads: int, head_dim: int, length: str) -> list[dict]:
    return [{"name": f"{prefix}.{i}.{kind}", "dtype": "float32", "shape": ["batch", heads, length, head_dim]}
            for i in range(layers) for kind in ("key", "value")]


def present_names(layers: int) -> list[str]:
    return [f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]


def causal_lm(name, family, cls, config, heads, head_dim, positions) -> TorchRecipe:
    layers = config.num_hidden_layers
    inputs = [tokens(), {"name": "attention_mask", "dtype": "int64", "shape": ["batch", "total_sequence"],
                         "values": "mask"}]
    if positions:
        inputs.append({"name": "position_ids", "dtype": "int64", "shape": ["batch", "sequence"],
                       "values": "positions", "offset": "past_sequence"})
    inputs += kv_specs("past_key_values", layers, heads, head_dim, "past_sequence")
    return TorchRecipe(
        name, family, f"transformers.{cls.__name__}({type(config).__name__}: hidden 32, {layers} layers, "
                      f"{heads} kv heads) with past_key_values (DynamicCache)",
        lambda: CausalLMWithPast(cls(config), layers, positions), inputs, ["logits", *present_names(layers)],
        with_total(KV_EXPORT), [with_total(d) for d in KV_TESTS])


def decoder_with_past(name, family, source, build, layers, heads, head_dim, d_model) -> TorchRecipe:
    inputs = [tokens(), *kv_specs("past_key_values", layers, heads, head_dim, "past_sequence"),
              *kv_specs("cross_key_values", layers, heads, head_dim, "encoder_sequence")]
    return TorchRecipe(name, family, source + " with past (EncoderDecoderCache, cross-attention reused)",
                       lambda: DecoderWithPast(build(), layers, d_model), inputs, ["last_hidden_state", *present_names(layers)],
                       with_total(KV_EXPORT), [with_total(d) for d in KV_TESTS])


def kv_recipes() -> list[TorchRecipe]:
    llama = dict(vocab_size=VOCAB, num_key_value_heads=1, max_position_embeddings=64, **SMALL)
    t5 = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                     num_heads=2, relative_attention_num_buckets=8, decoder_start_token_id=0)
    t5_eager = tf.T5Config(**{**t5.to_dict(), "attn_implementation": "eager"})
    whisper = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
                               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                               decoder_ffn_dim=64, max_source_positions=16, max_target_positions=16,
                               pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    bart = tf.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                         decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    return [
        causal_lm("gpt2_kv", "gpt2", tf.GPT2LMHeadModel,
                  tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0,
                                eos_token_id=0), 2, 16, positions=False),
        causal_lm("llama_kv", "llama", tf.LlamaForCausalLM, tf.LlamaConfig(**llama), 1, 16, positions=True),
        causal_lm("qwen2_kv", "qwen2", tf.Qwen2ForCausalLM, tf.Qwen2Config(**llama), 1, 16, positions=True),
        decoder_with_past("t5_decoder_kv", "t5", "transformers.T5Model(T5Config: d_model=32, 2+2 layers).decoder",
                          lambda: tf.T5Model(t5).decoder, 2, 2, 16, 32),
        dynamo_only(decoder_with_past(
            "t5_decoder_kv_eager", "t5", "transformers.T5Model(T5Config: d_model=32, 2+2 layers, eager attention)"
            ".decoder", lambda: tf.T5Model(t5_eager).decoder, 2, 2, 16, 32)),
        decoder_with_past("whisper_decoder_kv", "whisper",
                          "transformers.WhisperModel(WhisperConfig: d_model=32, 2+2 layers).decoder",
                          lambda: tf.WhisperModel(whisper).decoder, 2, 2, 16, 32),
        decoder_with_past("bart_decoder_kv", "bart", "transformers.BartModel(BartConfig: d_model=32, 2+2 layers).decoder",
                          lambda: tf.BartModel(bart).decoder, 2, 2, 16, 32),
    ]
