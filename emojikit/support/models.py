"""Loading a causal LM and its tokenizer, offline-first.

The bundled models ship as GGUF files; transformers dequantizes them on every load (SmolLM2
~20 s, Gemma 3 270M ~60 s), so the fp32 weights are saved once to the emojikit cache and later
loads read those (~1-2 s).
The local backend, the local-LM judge and the benchmarks load models through here; a plugin
that needs a model does too, as `emojikit.load_model_and_tokenizer` (docs/plugins.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from emojikit.support import bundled
from emojikit.api.errors import ConfigError, ModelUnavailableError
from emojikit.support.io import atomic_directory

DTYPES = ("float32", "bfloat16")


def resolve_device(device: str = "auto") -> str:
    """'auto' picks cuda, then mps, then cpu."""
    import torch

    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_dtype(dtype: str):
    import torch

    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return getattr(torch, dtype)


def clear_quantization_markers(model) -> None:
    """A GGUF-loaded model is float32 but still flagged as quantized, which makes peft and
    the Trainer refuse or mis-handle it; drop the flags."""
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            setattr(model, attr, None)
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def _unavailable(model: str, exc: BaseException) -> ModelUnavailableError:
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return ModelUnavailableError(
        f"model {model!r} is not available offline ({first_line}); download it once with "
        f"`huggingface-cli download {model}` (without HF_HUB_OFFLINE), or set model to a local "
        f"directory or to {bundled.SMOLLM2!r}"
    )


def _cached_bundled_dir(model: str) -> Path:
    return bundled.cache_dir("models", model.removeprefix("bundled:"))


def _write_bundled_cache(model: str, lm) -> None:
    """Save the dequantized weights atomically: a temp dir, then one rename."""
    try:
        with atomic_directory(_cached_bundled_dir(model), replace=False) as tmp:
            lm.save_pretrained(str(tmp))
    except OSError:
        pass  # another process won the race (its copy is equal), or the cache cannot be written


def load_model(model: str, dtype: str = "float32", device: str = "auto"):
    """A causal LM in eval mode with plain (unquantized) weights, on the resolved device."""
    from transformers import AutoModelForCausalLM

    bundled.quiet_transformers()
    torch_dtype = resolve_dtype(dtype)
    if model in bundled.BUNDLED:
        cached = _cached_bundled_dir(model)
        if (cached / "config.json").exists():
            lm = AutoModelForCausalLM.from_pretrained(str(cached), dtype=torch_dtype)
        else:
            path, kwargs = bundled.resolve_model(model)
            lm = AutoModelForCausalLM.from_pretrained(path, dtype="float32", **kwargs)
            clear_quantization_markers(lm)
            _write_bundled_cache(model, lm)
            lm = lm.to(torch_dtype)
    else:
        path, kwargs = bundled.resolve_model(model)
        try:
            lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kwargs)
        except OSError as exc:
            raise _unavailable(model, exc) from None
    clear_quantization_markers(lm)
    lm.eval()
    return lm.to(resolve_device(device))


def decoder_layer_count(model: str) -> Optional[int]:
    """The model's number of decoder layers, read from its config alone (no weights): the
    dequantized copy's config.json, a local directory's, the cached hub config, or the bundled
    GGUF's header. None when none of these is on disk; the model's load finds out then."""
    config_file = None
    if model in bundled.BUNDLED:
        config_file = _cached_bundled_dir(model) / "config.json"
        if not config_file.is_file():  # no dequantized copy yet: transformers reads the GGUF's header
            from transformers import AutoConfig

            try:
                path, kwargs = bundled.resolve_model(model)
                return int(AutoConfig.from_pretrained(path, **kwargs).num_hidden_layers)
            except Exception:  # noqa: BLE001 - the load reports what is wrong with the model
                return None
    elif Path(model).is_dir():
        config_file = Path(model) / "config.json"
    elif not Path(model).exists():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        config_file = Path(cached) if isinstance(cached, str) else None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        return int(config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"])
    except (AttributeError, OSError, ValueError, KeyError, TypeError):
        return None


def _padded_tokenizer(model: str):
    """bundled.load_tokenizer's tokenizer, with a pad token (the EOS token when it has none)."""
    try:
        tokenizer = bundled.load_tokenizer(model)
    except (OSError, ValueError) as exc:
        raise _unavailable(model, exc) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(model: str, dtype: str = "float32", device: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) for a model reference: `bundled:smollm2-135m-instruct`, a local path,
    or a Hugging Face id (from the local cache only when HF_HUB_OFFLINE is set)."""
    tokenizer = _padded_tokenizer(model)  # first: it fails fastest when the model is missing
    return load_model(model, dtype=dtype, device=device), tokenizer
