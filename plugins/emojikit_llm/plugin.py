"""The `llm` plugin: trained emojikit senders as llm models.

Which senders: every finished SFT or GRPO run under ./runs of the directory llm runs in, as
`emojikit-<run>` (runs/sft -> emojikit-sft), and those added by hand with
`llm emojikit add NAME PATH` (a checkpoint, a run directory, or an `emojikit export` folder),
kept in emojikit.json in llm's user directory. Answers come from emojikit's own sampler
under the run's decoder (the emoji mask), so they are always emoji; llm logs them as it
logs any model's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import click
import llm
from pydantic import Field

from emojikit.support.io import atomic_write_text

PREFIX = "emojikit-"
REGISTRY_FILE = "emojikit.json"  # in llm.user_dir(): name -> absolute path


def _registry_file() -> Path:
    return llm.user_dir() / REGISTRY_FILE


def added_senders() -> dict[str, str]:
    try:
        data = json.loads(_registry_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def known_senders(runs_dir: Path = Path("runs")) -> dict[str, str]:
    """Model id -> reference: the finished runs under runs_dir, then the ones added by hand."""
    from emojikit.export.senders import finished_senders

    found = {PREFIX + name: str(sender.run_dir.resolve()) for name, sender in finished_senders(runs_dir).items() if sender.run_dir is not None}
    found.update(added_senders())
    return found


class EmojikitSender(llm.Model):
    can_stream = False

    class Options(llm.Options):
        temperature: Optional[float] = Field(0.7, ge=0, le=5, description="Sampling temperature (0: greedy)")

    def __init__(self, model_id: str, ref: str):
        self.model_id = model_id
        self.ref = ref
        self._parts: Optional[dict[str, Any]] = None
        self._sender = None

    def __str__(self) -> str:
        return f"emojikit: {self.model_id} ({self.ref})"

    def _load(self):
        if self._parts is None:
            from emojikit.export import senders

            self._sender = senders.resolve(self.ref)
            self._parts = senders.build(self._sender)
        return self._sender, self._parts

    def execute(self, prompt, stream, response, conversation):
        from emojikit.api.errors import EmojikitError
        from emojikit.api.policy import SamplingParams

        try:
            sender, parts = self._load()
        except EmojikitError as exc:
            raise llm.ModelError(str(exc)) from None
        messages = [{"role": "system", "content": prompt.system or sender.system_prompt}]
        for earlier in (conversation.responses if conversation is not None else []):
            messages += [{"role": "user", "content": earlier.prompt.prompt}, {"role": "assistant", "content": earlier.text()}]
        messages.append({"role": "user", "content": prompt.prompt})
        temperature = prompt.options.temperature if prompt.options.temperature is not None else 0.7
        fmt = sender.format
        params = SamplingParams(max_tokens=4 * fmt.max_emoji, temperature=max(temperature, 1e-4))
        ((sample, *_),) = parts["backend"].sample([messages], 1, params, parts["decoder"])
        yield sample.text.strip()


@llm.hookimpl
def register_models(register):
    for model_id, ref in known_senders().items():
        register(EmojikitSender(model_id, ref))


@llm.hookimpl
def register_commands(cli):
    @cli.group(name="emojikit")
    def emojikit_group():
        "Trained emojikit senders as llm models"

    @emojikit_group.command(name="add")
    @click.argument("name")
    @click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
    def add(name: str, path: Path):
        """Register PATH (a checkpoint, a run directory or an `emojikit export` folder) as model NAME (emojikit- is prefixed when missing)."""
        from emojikit.api.errors import EmojikitError
        from emojikit.export import senders

        try:
            senders.resolve(str(path))
        except EmojikitError as exc:
            raise click.ClickException(str(exc)) from None
        model_id = name if name.startswith(PREFIX) else PREFIX + name
        data = added_senders()
        data[model_id] = str(path.resolve())
        atomic_write_text(_registry_file(), json.dumps(data, indent=2) + "\n")
        click.echo(f"added {model_id}: {path.resolve()}")

    @emojikit_group.command(name="remove")
    @click.argument("name")
    def remove(name: str):
        """Forget a sender added with `llm emojikit add`."""
        data = added_senders()
        model_id = name if name in data else PREFIX + name
        if model_id not in data:
            raise click.ClickException(f"{name}: not added with `llm emojikit add`")
        del data[model_id]
        atomic_write_text(_registry_file(), json.dumps(data, indent=2) + "\n")
        click.echo(f"removed {model_id}")

    @emojikit_group.command(name="list")
    def list_senders():
        """The emojikit senders llm knows here: finished runs under ./runs and added ones."""
        for model_id, ref in known_senders().items():
            click.echo(f"{model_id}: {ref}")
