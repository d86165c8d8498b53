"""Registers the `local` backend. Nothing heavy is imported at module level."""

from __future__ import annotations

from pathlib import Path

from emojikit.support import bundled
from emojikit.api.components import BuildContext, Component
from emojikit.api.errors import ConfigError, ModelUnavailableError
from emojikit.api.hookspecs import hookimpl
from emojikit_local.config import LocalConfig


def build_local_policy(config: LocalConfig, ctx: BuildContext):
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    # float32 either way: dtype = "bfloat16" keeps norms, embeddings and LoRA in fp32 (precision.py)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype="float32", device=config.device)
    return LocalPolicy(model, tokenizer, config, seed=ctx.seed)


def check_model_available(config: LocalConfig, ctx: BuildContext) -> None:
    """Fail during validation, before anything loads, when the model cannot be found offline
    or has fewer decoder layers than lora_layers asks for."""
    if (problem := bundled.model_problem(config.model)) is not None:
        raise ModelUnavailableError(problem)
    if config.model.startswith("bundled:"):
        bundled.resolve_model(config.model)
    elif not Path(config.model).exists() and bundled.is_offline():
        check_in_hub_cache(config.model)
    if config.lora_layers is not None:
        from emojikit.support.models import decoder_layer_count

        layers = decoder_layer_count(config.model)
        if layers is not None and config.lora_layers > layers:
            raise ConfigError(f"lora_layers = {config.lora_layers}: the model has {layers} decoder layers")


def check_in_hub_cache(model: str) -> None:
    """A hub id while offline: its config.json must be in the local cache."""
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(model, "config.json"), str):
        raise ModelUnavailableError(
            f"model {model!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            f"download it once with `huggingface-cli download {model}`, or set model to a local "
            f"directory or to {bundled.SMOLLM2!r}"
        )


@hookimpl
def register_backends():
    return [
        Component(
            name="local",
            summary="LoRA on a local transformers model (bundled SmolLM2-135M-Instruct by default), trained with torch + peft",
            config=LocalConfig,
            factory=build_local_policy,
            preflight=check_model_available,
        )
    ]
