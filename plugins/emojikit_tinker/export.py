"""`emojikit export` for the Tinker backend: the checkpoint's LoRA through the SDK's download.

As `tinker checkpoint download` does it: the loaded training state is saved as external
(Hugging Face format) weights with a short TTL, every file is fetched from its signed URL,
and the temporary export is deleted. The adapter names the Tinker base model (a Hub id);
a merged export loads that base with transformers (from the local cache when offline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emojikit.api.errors import InputFileError, ModelUnavailableError, RemoteServiceError
from emojikit.api.format import chat_template_with_system
from emojikit.support import bundled

from emojikit_tinker.clients import make_rest_client
from emojikit_tinker.retry import remote_error

EXPORT_TTL_SECONDS = 3600  # the temporary external weights outlive a slow download, then expire


def download_adapter(policy, directory: Path) -> None:
    """The loaded state's LoRA files into `directory` (tinker's signed-URL download)."""
    import httpx

    policy._start()
    policy._wait_for_training()
    saved = policy._retrier.call(lambda: policy._training.save_weights_external("emojikit-export", ttl_seconds=EXPORT_TTL_SECONDS), "save_weights_external")
    rest = make_rest_client(policy.config.base_url, "emojikit export")
    try:
        try:
            urls = rest.get_external_weights_urls(saved.path).result().urls
        except Exception as exc:  # noqa: BLE001
            raise remote_error(exc, "get_external_weights_urls") from exc
        if not urls:
            raise RemoteServiceError(f"{saved.path}: Tinker's export has no files")
        base = directory.resolve()
        for name, url in sorted(urls.items()):
            target = (directory / name).resolve()
            if not target.is_relative_to(base):
                raise RemoteServiceError(f"{saved.path}: unsafe file name {name!r} in Tinker's export")
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with httpx.stream("GET", url, timeout=60, follow_redirects=True) as response:
                    response.raise_for_status()
                    with open(target, "wb") as f:
                        for chunk in response.iter_bytes(1 << 20):
                            f.write(chunk)
            except httpx.HTTPError as exc:
                raise RemoteServiceError(f"downloading {name} of {saved.path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    finally:
        try:
            rest.delete_checkpoint_from_tinker_path(saved.path).result()
        except Exception:  # noqa: BLE001 - it expires after EXPORT_TTL_SECONDS anyway
            pass
    if not (directory / "adapter_config.json").is_file():
        raise InputFileError(f"{saved.path}: Tinker's export has no adapter_config.json (files: {', '.join(sorted(urls))})")


def export_weights(policy, out: str, *, merged: bool, system_prompt: str) -> dict[str, Any]:
    out_dir = Path(out)
    base_model = policy.config.base_model
    download_adapter(policy, out_dir)
    config_file = out_dir / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    info: dict[str, Any] = {
        "base_model": base_model,
        "base_note": "trained on Tinker with this base model",
        "dtype": "float32" if merged else "as Tinker exported it",
        "lora": {"r": config.get("r"), "alpha": config.get("lora_alpha"), "target_modules": config.get("target_modules")},
    }
    tokenizer = policy.tokenizer
    tokenizer.chat_template = chat_template_with_system(tokenizer.chat_template or "", system_prompt)
    if merged:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        path, kwargs = bundled.resolve_model(base_model)
        try:
            base = AutoModelForCausalLM.from_pretrained(path, dtype="float32", **kwargs)
        except OSError as exc:
            raise ModelUnavailableError(
                f"the Tinker base model {base_model!r} is not available here ({str(exc).splitlines()[0]}); "
                "a merged export needs its weights: download it once with `huggingface-cli download`, or export --adapter"
            ) from None
        plain = PeftModel.from_pretrained(base, str(out_dir)).merge_and_unload()
        for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
            (out_dir / name).unlink(missing_ok=True)
        plain.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    return info
