"""The model card (README.md with the Hub's YAML metadata header) of an exported sender.

Everything in it is read from the run directory: the method from recipe.toml's kind, the
resolved recipe itself (already redacted when the run wrote it, scrubbed again here), the
data it learned from (the data run's recipe and data_stats.json), and the held-out figures
the run measured (comparison.json of a GRPO run, else its eval.jsonl; eval_sft.json of an
SFT run). Nothing is measured at export time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from emojikit.api.secrets import scrub
from emojikit.export.senders import Sender, read_recipe

METHODS = {
    "sft": "supervised fine-tuning (SFT, LoRA) on (message, emoji) pairs",
    "grpo": "GRPO (LoRA) on emojikit's multi-turn retrieval game: a frozen judge reconstructs the message from the emoji, the reward is the similarity of its guess to the message",
}
KNOWN_LICENSES = {"HuggingFaceTB/SmolLM2-135M-Instruct": "apache-2.0"}


def _json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _last_jsonl(path: Path) -> Optional[dict]:
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        row = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) else None


def _use(recipe: dict, table: str) -> Optional[str]:
    body = recipe.get(table)
    return body.get("use") if isinstance(body, dict) else None


def heldout_figures(sender: Sender) -> list[str]:
    """Markdown lines with the run's own held-out measurements, [] when it has none."""
    run_dir = sender.run_dir
    if run_dir is None:
        return []
    lines: list[str] = []
    comparison = _json(run_dir / "comparison.json")
    if isinstance(comparison, dict) and isinstance(comparison.get("checkpoints"), dict):
        lines += [
            f"Held-out retrieval game ({comparison.get('targets')} targets never trained on, judge `{comparison.get('judge')}`, "
            f"seed {comparison.get('seed')}, up to {comparison.get('max_turns')} turns, sender temperature {comparison.get('temperature')}, "
            "answers under emojikit's emoji mask), from the run's comparison.json:",
            "",
            "| sender | success rate | mean similarity | mean turns | format violations |",
            "|---|---|---|---|---|",
        ]
        for label, entry in comparison["checkpoints"].items():
            m = entry.get("masked", {}) if isinstance(entry, dict) else {}
            try:
                lines.append(f"| {label} | {m['success_rate']:.3f} | {m['similarity']:.3f} | {m['mean_turns']:.2f} | {m['format_violations']:.3f} |")
            except (KeyError, TypeError, ValueError):
                continue
        senders = comparison.get("senders")
        if isinstance(senders, dict):
            lines += ["", "; ".join(f"{label} = `{what}`" for label, what in senders.items() if label != what)]
        machine = comparison.get("machine")
        if isinstance(machine, dict) and machine.get("cpu_kind"):
            lines += ["", f"Measured on {machine.get('cpu', 'a CPU')} (`cpu_kind` {machine['cpu_kind']}): one run, one seed; another seed or CPU kind "
                      "moves these figures by a few points."]
    elif (row := _last_jsonl(run_dir / "eval.jsonl")) is not None:
        try:
            lines.append(
                f"Held-out retrieval game at step {row['step']} ({row['targets']} targets, from the run's eval.jsonl, under the emoji mask): "
                f"success rate {row['success_rate']:.3f}, mean similarity {row['similarity']:.3f}, mean turns {row['mean_turns']:.2f}, "
                f"format violations {row['format_violations']:.3f}."
            )
        except (KeyError, TypeError, ValueError):
            pass
    report = _json(run_dir / "eval_sft.json")
    if isinstance(report, dict):
        rows = []
        for mode in ("unmasked", "masked"):
            stats = report.get(mode)
            if isinstance(stats, dict) and "in_range_rate" in stats:
                rows.append(f"| {mode} | {stats['emoji_only_rate']:.3f} | {stats['in_range_rate']:.3f} | {stats.get('distinct_per_100', 0):.1f} |")
        if rows:
            lines += [
                *([""] if lines else []),
                f"Format on {report.get('prompts')} held-out SFT prompts (temperature {report.get('temperature')}), from the run's eval_sft.json; "
                "`unmasked` is how the exported model answers on its own:",
                "",
                f"| decoding | emoji-only rate | {report.get('emoji_range', '2-8')} emoji rate | distinct emoji / 100 answers |",
                "|---|---|---|---|",
                *rows,
            ]
    return lines


def provenance(sender: Sender, depth: int = 0) -> list[str]:
    """Markdown bullets: where the run's data came from, following a GRPO run to its start."""
    recipe, run_dir = sender.recipe, sender.run_dir
    lines: list[str] = []
    if sender.kind == "sft":
        sft = recipe.get("sft", {}) if isinstance(recipe.get("sft"), dict) else {}
        train = sft.get("train_file")
        lines.append(f"- SFT data: `{train}` (chat rows: system prompt, message, emoji answer)" if train else "- SFT data: not recorded")
        data_dir = Path(train).parent if train else None
        if data_dir is not None and (data_dir / "recipe.toml").is_file():
            data = read_recipe(data_dir)
            lines.append(f"- made by the data run `{data_dir}`: messages from the `{_use(data, 'prompts')}` prompt source, emoji answers from the `{_use(data, 'teacher')}` teacher")
            stats = _json(data_dir / "data_stats.json")
            if isinstance(stats, dict):
                counts = ", ".join(f"{k} {v}" for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool))[:400]
                if counts:
                    lines.append(f"- data_stats.json: {counts}")
    elif sender.kind == "grpo":
        grpo = recipe.get("grpo", {}) if isinstance(recipe.get("grpo"), dict) else {}
        lines.append(
            f"- GRPO training targets from the `{_use(recipe, 'prompts')}` prompt source; judge `{_use(recipe, 'judge')}`, reward `{_use(recipe, 'reward')}`; "
            f"held-out targets `{grpo.get('heldout_file')}` (never trained on)"
        )
        start = (_json(run_dir / "start.json") or {}).get("start") if run_dir is not None else None
        if start:
            lines.append(f"- started from `{start}`")
            if start != "base" and depth < 2:
                from emojikit.export.senders import resolve
                from emojikit.api.errors import EmojikitError

                try:
                    lines += provenance(resolve(start), depth + 1)
                except EmojikitError:
                    pass
    return lines


def model_card(sender: Sender, info: dict[str, Any], *, merged: bool, repo_id: Optional[str] = None, out: Optional[Path] = None) -> str:
    """The README.md of an export: YAML header for the Hub, then what a reader needs. Its usage
    code loads the Hub repository `repo_id` when there is one, else the folder `out` (as the
    user named it to `emojikit export`)."""
    base = info["base_model"]
    fmt = sender.format
    method = METHODS.get(sender.kind or "", f"a `{sender.kind}` run of emojikit" if sender.kind else "emojikit (the run's recipe was not found beside the checkpoint)")
    tags = ["emojikit", "emoji", "lora", *([sender.kind] if sender.kind else []), *(["grpo", "reinforcement-learning"] if sender.kind == "grpo" else [])]
    header = [
        "---",
        f"base_model: {base}",
        f"base_model_relation: {'finetune' if merged else 'adapter'}",
        f"library_name: {'transformers' if merged else 'peft'}",
        "pipeline_tag: text-generation",
        f"license: {KNOWN_LICENSES.get(base, 'other')}",
        "language:",
        "- en",
        "tags:",
        *(f"- {t}" for t in dict.fromkeys(tags)),
        "---",
    ]
    title = repo_id or f"emojikit-{sender.name}"
    what = "the LoRA merged into the base model (a plain transformers model folder)" if merged else "a PEFT LoRA adapter"
    load = repo_id or (Path(out).as_posix() if out is not None else "path/to/this/folder")
    lines = [
        "",
        f"# {title}",
        "",
        f"An emoji sender trained with emojikit: it answers a message with {fmt.range_text} emoji "
        f"and nothing else. This folder is {what}, exported by `emojikit export` from `{sender.checkpoint}`.",
        "",
        "## Use",
        "",
    ]
    if merged:
        lines += [
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f'tokenizer = AutoTokenizer.from_pretrained("{load}")',
            f'model = AutoModelForCausalLM.from_pretrained("{load}")',
            'messages = [{"role": "user", "content": "I just adopted a kitten"}]',
            "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors=\"pt\", return_dict=True)",
            "out = model.generate(**inputs, max_new_tokens=32, do_sample=False)",
            'print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
            "```",
            "",
            f"vLLM: `vllm serve {load}`. The chat template puts the sender's system prompt in when a conversation has none.",
        ]
    else:
        lines += [
            "```python",
            "from peft import AutoPeftModelForCausalLM",
            "from transformers import AutoTokenizer",
            f'model = AutoPeftModelForCausalLM.from_pretrained("{load}")  # loads {base}, then the adapter',
            f'tokenizer = AutoTokenizer.from_pretrained("{load}")  # carries the sender\'s chat template',
            "```",
            "",
            f"vLLM: `vllm serve {base} --enable-lora --lora-modules emoji={load}` (then ask for model `emoji` with the system prompt below).",
        ]
    lines += [
        "",
        "## Model",
        "",
        f"- base model: `{base}`",
        *([f"- {info['base_note']}"] if info.get("base_note") else []),
        f"- weights: {info.get('dtype')}" + (" (merged: base + LoRA delta, computed in that dtype)" if merged else " (the adapter)"),
        *([f"- LoRA: rank {info['lora']['r']}, alpha {info['lora']['alpha']}, modules {info['lora']['target_modules']}" + (f", layers {info['lora']['layers'][0]}-{info['lora']['layers'][-1]}" if info["lora"].get("layers") else "")] if info.get("lora") else []),
        f"- method: {method}",
        f"- checkpoint: `{sender.checkpoint}`" + (f" (step {sender.step})" if sender.step is not None else ""),
    ]
    backend = sender.backend
    if backend.get("base_matmul_dtype") == "bfloat16":
        lines.append("- the run computed the frozen base projections in bfloat16 (`base_matmul_dtype`); the export is in the dtype above, so logprobs differ from the training run's by about 0.03 nats")
    lines += ["", "## Emoji format", "", f"- answers: {fmt.range_text} emoji and nothing else (whitespace between them allowed)", f'- system prompt: "{sender.system_prompt}" (the chat template inserts it when a conversation has none)',
              "- emojikit decodes this sender under an exact emoji mask; a plain `generate` has no mask, so an answer may break the format (see the unmasked figures below, where the run measured them)"]
    figures = heldout_figures(sender)
    lines += ["", "## Held-out figures", ""] + (figures or ["The run directory holds no held-out figures (no comparison.json, eval.jsonl or eval_sft.json)."])
    prov = provenance(sender)
    lines += ["", "## Training data", ""] + (prov or ["Not recorded beside this checkpoint."])
    lines += [
        "",
        "## Intended use and limits",
        "",
        "- for playing and studying emoji communication: a message in, a few emoji out; not for questions that need a factual or safe answer",
        "- English messages of a sentence or two, like the training prompts; long or other-language input is out of distribution",
        "- emoji choice follows the training data's teacher and judge (emoji names and keywords), with their cultural and lexical biases",
        f"- a {'small ' if '135M' in base else ''}model: expect literal, sometimes repetitive emoji",
    ]
    if sender.recipe:
        toml = (sender.run_dir / "recipe.toml").read_text(encoding="utf-8") if sender.run_dir is not None else ""
        lines += ["", "## Resolved recipe", "", "The run's recipe.toml (secrets redacted):", "", "```toml", toml.rstrip(), "```"]
    return scrub("\n".join(header + lines) + "\n")
