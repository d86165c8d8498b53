"""The `emojikit` command line. An EmojikitError prints as one line and exits with status 2."""

from __future__ import annotations

import functools
import json
import sys
import warnings
from pathlib import Path

from emojikit.support.torch_env import prepare_torch_environment

prepare_torch_environment()  # before anything imports torch

import click  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from emojikit.api.errors import EmojikitError  # noqa: E402
from emojikit.composition.registry import KINDS, get_registry  # noqa: E402
from emojikit.api.secrets import scrub  # noqa: E402

MAX_TEMPERATURE = 5.0  # beyond this, sampling is noise
SEED_MAX = 2**32 - 1


def fail(message: str) -> None:
    """Print `emojikit: error: <one line>` and exit with status 2."""
    message = " ".join(scrub(str(message)).split("\n"))
    click.echo(f"emojikit: error: {message}", err=True)
    sys.exit(2)


def friendly_errors(fn):
    """Turn a user-fixable error into `emojikit: error: <one line>` and exit status 2.

    Operating-system failures a user can fix (full disk, read-only location, a directory where
    a file should be) count as such even where no code named them: path and problem, one line."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from emojikit.support.io import os_problem

        try:
            return fn(*args, **kwargs)
        except EmojikitError as exc:
            fail(str(exc))
        except OSError as exc:
            if os_problem(exc) is None:
                raise
            fail(f"{exc.filename or ''}: {os_problem(exc)}".lstrip(": "))

    return wrapper


class OneLineErrors(click.Group):
    """Bad command-line values (a range, a missing argument) are one line too, exit status 2.

    `emojikit` alone is not an error to squash into one line: like argparse, it prints the
    usage and the command list on stderr, then `emojikit: error: missing command`, status 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), err=True)
            click.echo(f"\n{ctx.command_path}: error: missing command (one of the commands above; {ctx.command_path} COMMAND --help for its options)", err=True)
            sys.exit(2)  # not ctx.exit: click's main(standalone_mode=False) would return the 2
        return super().parse_args(ctx, args)

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:  # --help, --version
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            fail(exc.format_message())


def _kind(value: str) -> str:
    from emojikit.api.errors import ConfigError

    from emojikit.composition.registry import canonical_kind, did_you_mean

    kind = canonical_kind(value)  # prompt_source, prompt-source and "prompt source" are one kind
    if kind not in KINDS:  # one line like every other bad input, not click's usage block
        raise ConfigError(f"{value!r} is not a component kind{did_you_mean(value, KINDS)}; kinds: {', '.join(KINDS)}")
    return kind


def shipped_recipe(ctx, param, value: Path) -> Path:
    """A default --recipe (recipes/eval.toml) run from outside the checkout: the checkout's own
    file, so `emojikit eval` works from any directory (outputs still go under this one)."""
    if value == Path(param.default) and not value.exists():
        checkout = Path(__file__).resolve().parents[2] / value
        if checkout.is_file():
            return checkout
    return value


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="emojikit")
def cli():
    """Teach language models to communicate in emoji."""


@cli.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override a recipe value (repeatable).")
@click.option("--resume", is_flag=True, help="Continue RECIPE's run directory (its out) from its last checkpoint, whatever its stage.json says; an interrupted stage of an unchanged recipe resumes without it.")
@click.option("--no-upstream", is_flag=True, help="Run only RECIPE; the recipes it names ([sft] data, [grpo] start_from) must have finished runs.")
@click.option("--dry-run", is_flag=True, help="Print the plan (stage, reuse/resume/run/skip, why) and exit.")
@click.option("--tracker", "trackers", multiple=True, metavar="NAME", help="Also send every stage this command runs to this tracker (repeatable: tensorboard, trackio, wandb, mlflow or a plugin's); joins [tracking] use.")
@friendly_errors
def run(recipe: Path, overrides: tuple[str, ...], resume: bool, no_upstream: bool, dry_run: bool, trackers: tuple[str, ...]):
    """Validate RECIPE and the recipes it names, then run what is missing (data, sft, grpo, rft or eval).

    Each stage runs in its own run directory; a finished run of the same recipe and inputs is
    reused, an interrupted one resumed, a changed recipe runs into a new directory."""
    from emojikit.stages import pipeline

    stages = pipeline.plan(recipe, list(overrides), resume=resume, no_upstream=no_upstream, trackers=list(trackers))
    if dry_run:
        for line in pipeline.describe(stages):
            click.echo(line)
        return
    pipeline.execute(stages, echo=click.echo)


@cli.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE")
@friendly_errors
def validate(recipe: Path, overrides: tuple[str, ...]):
    """Check RECIPE (every component config and input file) without running it."""
    from emojikit.composition.recipe import check_ready, load_recipe
    from emojikit.stages.pipeline import upstream_overrides, upstream_ref

    loaded = load_recipe(recipe, list(overrides))
    note = ""
    ref = upstream_ref(loaded)
    if loaded.kind == "sft" and ref is not None:
        # [sft] data names the data recipe: its finished run's files are what the run reads.
        named = load_recipe(ref[2])  # the data recipe is valid too
        try:
            extra = upstream_overrides(recipe, list(overrides))
        except EmojikitError:
            extra = None
        if extra is None:
            check_ready(named)
            note = f"; [sft] train_file and test_file come from {ref[2]}, which has no finished run yet: `emojikit run {recipe}` runs it first"
        else:
            check_ready(load_recipe(recipe, list(overrides) + extra, typed=list(overrides)))
    else:
        check_ready(loaded)
    parts = ", ".join(f"{t}={c.spec.name}" for t, c in loaded.components.items())
    click.echo(f"{recipe}: ok ({loaded.kind}: {parts}; run directory {loaded.out}{note})")


@cli.command("list-plugins")
@click.option("--kind", "kind", default=None, help="Only this component kind.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: components and load failures.")
@friendly_errors
def list_plugins(kind: str | None, as_json: bool):
    """List installed components: kind, name, plugin, distribution and version, summary."""
    registry = get_registry()
    components = registry.components(_kind(kind) if kind else None)
    conflicts = [c for c in registry.conflicts if kind is None or c.kind == _kind(kind)]
    if as_json:
        out = {
            "kinds": list(KINDS),
            "components": [
                {"kind": c.kind, "name": c.name, "plugin": c.plugin, "distribution": c.distribution, "version": c.version, "summary": c.summary, "needs_key": c.needs_key}
                for c in components
            ],
            "conflicts": [
                {"kind": c.kind, "name": c.name, "providers": [{"plugin": p.plugin, "distribution": p.distribution, "version": p.version} for p in c.providers]}
                for c in conflicts
            ],
            "failures": [f.__dict__ for f in registry.failures],
        }
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    for c in components:
        origin = f"{c.plugin} ({c.distribution} {c.version})".strip()
        click.echo(f"{c.kind:<14} {c.name:<14} {origin:<34} {c.summary}")
    for c in conflicts:
        providers = ", ".join(f"{p.plugin} ({p.distribution} {p.version})".strip() for p in c.providers)
        click.echo(f"CONFLICT       {c.kind}/{c.name:<12} {providers}: unusable until one is blocked (EMOJIKIT_BLOCK_PLUGINS)")
    for f in registry.failures:
        click.echo(f"FAILED         {f.plugin:<14} {f.distribution:<34} {f.error}")


def loop_tables() -> dict[str, tuple[str, list[str]]]:
    """Recipe tables of loop settings ([grpo], [game], ...) -> (settings model ref, recipe kinds using it)."""
    from emojikit.composition.recipe import RECIPE_SHAPES

    tables: dict[str, tuple[str, list[str]]] = {}
    for recipe_kind, shape in RECIPE_SHAPES.items():
        for table, ref in shape["settings"].items():
            tables.setdefault(table, (ref, []))[1].append(recipe_kind)
    return tables


def echo_fields(model: type[BaseModel]) -> None:
    """Every field of a settings model: name, type, default, and its help on the next line."""
    from emojikit.api.config import describe_type

    if not model.model_fields:
        click.echo("  (no settings)")
    for field_name, field in model.model_fields.items():
        default = "required" if field.is_required() else json.dumps(field.get_default(call_default_factory=True), default=str, ensure_ascii=False)
        click.echo(f"  {field_name}: {describe_type(field.annotation, field.metadata)} = {default}")
        if field.description:
            click.echo(f"      {field.description}")


@cli.command()
@click.argument("kind", metavar="KIND|TABLE")
@click.argument("name", required=False)
@friendly_errors
def describe(kind: str, name: str | None):
    """Show every setting of a component (KIND NAME: judge retrieval) or of a recipe's loop
    table (TABLE: grpo, sft, rft, game, data, eval): type, default and help. KIND alone lists its
    components."""
    from emojikit.api.errors import ConfigError
    from emojikit.composition.recipe import TRACKING_TABLE, import_object

    tables = loop_tables()
    table = kind.strip().strip("[]").lower()
    if table == TRACKING_TABLE and name in (None, "settings"):  # no settings of its own: it names trackers
        click.echo(f"[{TRACKING_TABLE}] in every recipe: use = a tracker's name or a list of them; each tracker's settings in [{TRACKING_TABLE}.<name>]")
        for c in get_registry().components("tracker"):
            click.echo(f"tracker {c.name:<14} {c.summary}")
        click.echo("(settings of one: emojikit describe tracker NAME)")
        return
    if table in tables:
        if name not in (None, "settings"):
            raise ConfigError(f"describe {kind}: [{table}] is a recipe table, not a component kind; run: emojikit describe {table}")
        ref, recipe_kinds = tables[table]
        model = import_object(ref)
        click.echo(f"[{table}] in {' and '.join(recipe_kinds)} recipes ({ref.replace(':', '.')})")
        echo_fields(model)
        return
    try:
        canonical = _kind(kind)
    except ConfigError:
        raise ConfigError(f"{kind!r} is neither a component kind nor a recipe table; kinds: {', '.join(KINDS)}; tables: {', '.join([*tables, TRACKING_TABLE])}") from None
    if name is None:
        for c in get_registry().components(canonical):
            click.echo(f"{c.kind} {c.name:<14} {c.summary}")
        click.echo(f"(settings of one: emojikit describe {canonical} NAME)")
        return
    spec = get_registry().get(canonical, name)
    click.echo(f"{spec.kind} {spec.name}: {spec.summary}")
    click.echo(f"  from plugin {spec.plugin} ({spec.distribution} {spec.version})")
    echo_fields(spec.config)


@cli.command("eval-sft")
@click.option("--checkpoint", default="base", show_default=True, help='A checkpoint or run directory (its final checkpoint), or "base" for the start model.')
@click.option("--recipe", "recipe_path", default="recipes/sft.toml", show_default=True, type=click.Path(path_type=Path), callback=shipped_recipe, help="SFT recipe giving the backend, decoder and test file.")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE")
@click.option("-n", "--examples", type=click.IntRange(min=1), default=100, show_default=True, help="Held-out prompts to sample.")
@click.option("--temperature", type=click.FloatRange(min=0.0, max=MAX_TEMPERATURE), default=0.7, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Report directory (default: the checkpoint's run directory, or runs/eval-sft-base).")
@friendly_errors
def eval_sft(checkpoint: str, recipe_path: Path, overrides, examples: int, temperature: float, out: Path | None):
    """Format compliance of sampled answers on held-out prompts, with and without the emoji mask."""
    from emojikit.api.errors import ConfigError
    from emojikit.evaluation.evaluate import format_report, write_report
    from emojikit.stages.pipeline import upstream_overrides
    from emojikit.composition.recipe import load_recipe
    from emojikit.training.sft import load_chats

    if checkpoint != "base":
        from emojikit.stages.runs import sender_checkpoint

        checkpoint = sender_checkpoint(checkpoint)  # a run directory: its final checkpoint, files checked before any model loads
    recipe = load_recipe(recipe_path, list(overrides))
    if recipe.kind == "sft":  # [sft] data = "recipes/data.toml": that data run's sft_test.jsonl, wherever it ran
        recipe = load_recipe(recipe_path, list(overrides) + upstream_overrides(recipe_path, list(overrides)), typed=list(overrides))
    if recipe.kind != "sft":
        raise ConfigError(f"{recipe_path}: eval-sft needs an sft recipe (its [sft] test_file and max_new_tokens), got kind = {recipe.kind!r}; pass --recipe recipes/sft.toml")
    if out is not None:
        from emojikit.support.io import check_writable

        check_writable(out, "the report directory (--out)")
    settings = recipe.settings["sft"]
    prompts = [chat[:-1] for chat in load_chats(settings.test_file, examples)]
    out = out or (Path(checkpoint).parent.parent if checkpoint != "base" else Path("runs/eval-sft-base"))
    policy = recipe.build("backend", out) if checkpoint == "base" else recipe.build_player(out)
    if checkpoint != "base":
        policy.load(checkpoint, with_optimizer=False)
    decoder = recipe.build("decoder", out) if recipe.has("decoder") else None
    report = format_report(policy, decoder, prompts, temperature=temperature, max_tokens=settings.max_new_tokens)
    report["checkpoint"] = checkpoint
    stem = "eval_sft" if checkpoint == "base" else f"eval_sft_{Path(checkpoint).name}"
    json_path, md_path = write_report(report, out, stem, title=f"SFT format report: {checkpoint}")
    click.echo(md_path.read_text())
    click.echo(f"wrote {json_path} and {md_path}")


@cli.command("eval")
@click.option("--recipe", "recipe_path", default="recipes/eval.toml", show_default=True, type=click.Path(path_type=Path), callback=shipped_recipe)
@click.option("--checkpoint", "checkpoints", multiple=True, help='Checkpoint or run directory (its final checkpoint), "base", or teacher:NAME (repeatable; compared side by side).')
@click.option("--targets", type=click.Path(path_type=Path), default=None, help="Targets: JSONL with text (and category), CSV/TSV with a text column, or one message per line; every target is played unless -n.")
@click.option("-n", "n_targets", type=click.IntRange(min=1), default=None, help="Play only the first N targets.")
@click.option("--judge", "judges", multiple=True, help="Judge component to use instead of the recipe's; repeat it to play every sender under several readers (a report per reader in OUT/JUDGE, the first turns sampled once, readers.md side by side).")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Report directory (default: the recipe's out).")
@click.option("--human-games", type=click.Path(path_type=Path), default=None, help="A human_games.jsonl from `emojikit serve`: people's success and similarity per checkpoint next to the model judge's (default checkpoints: those people played).")
@click.option("--repair-states", type=click.Path(path_type=Path), default=None, help="A repair states file (emojikit repair-states): every sender plays turn 2 only on its first-turn misses, next to the baselines own, repeat and teacher:lexicon-repair; repair.md/.json with paired comparisons.")
@friendly_errors
def eval_game(recipe_path: Path, checkpoints, targets, n_targets, judges, overrides, out, human_games, repair_states):
    """The held-out retrieval game for several checkpoints: same targets, judge and seed."""
    from emojikit.api.errors import ConfigError, InputFileError
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.runs import RunDir

    if len(set(judges)) < len(judges):
        raise ConfigError(f"--judge: each reader once ({', '.join(judges)})")
    if repair_states is not None:
        if len(judges) > 1:
            raise ConfigError("--repair-states takes one --judge: the states are that judge's wrong guesses")
        return repair_eval(recipe_path, repair_states, checkpoints, judges[0] if judges else None, overrides, out,
                           conflicting=targets or n_targets or human_games)

    from emojikit.stages.runs import not_a_sender_run

    for checkpoint in checkpoints:  # a data run is named as one ([eval] checkpoints' own check says less)
        if (problem := not_a_sender_run(checkpoint)) is not None:
            raise InputFileError(f"--checkpoint {problem}")
    people, checkpoints_given = None, bool(checkpoints)
    if human_games is not None:
        from emojikit.evaluation.human_games import checkpoints_played, read_games

        people = read_games(human_games)  # a bad file fails before any model loads
        checkpoints = checkpoints or tuple(c for c in checkpoints_played(people) if c == "base" or Path(c).is_dir())
    # Flags are settings, never TOML text: --judge replaces the whole table before the --set
    # values (so `--judge claude --set judge.timeout_s=2` sets the new judge's timeout), the
    # other flags win over --set (recipe.resolve_data).
    chosen = {"checkpoints": list(checkpoints), "targets_file": str(targets) if targets else None, "n_targets": n_targets}
    settings: dict = {"eval": {key: value for key, value in chosen.items() if value}} if any(chosen.values()) else {}
    if out:
        settings["out"] = str(out)
    flags = {"eval.checkpoints": "--checkpoint" if checkpoints_given else "--human-games", "eval.targets_file": "--targets", "eval.n_targets": "-n", "out": "--out"}
    recipe = load_recipe(recipe_path, list(overrides), choices={"judge": judges[0] if judges else None}, settings=settings, flags=flags)
    if len(judges) > 1 and recipe.kind != "eval":
        raise ConfigError(f"{recipe_path}: several --judge need an eval recipe (kind = \"eval\"), not kind = {recipe.kind!r}")
    # Several readers: one report directory each under OUT, every recipe checked before any plays.
    recipes = [recipe] if len(judges) < 2 else [
        load_recipe(recipe_path, list(overrides), choices={"judge": judge}, settings={**settings, "out": str(recipe.out / judge)}, flags=flags) for judge in judges]
    from emojikit.composition.recipe import check_ready
    from emojikit.evaluation.evaluate import LoadedSenders, readers_markdown
    from emojikit.stages.tracking import tracked

    for each in recipes:
        check_ready(each)  # targets and token budget, before the report directory is touched
    senders = LoadedSenders() if len(recipes) > 1 else None  # a sender's first turns are the same under every reader
    reports = {}
    for judge, each in zip(judges or [None], recipes):
        existing = each.out.is_dir() and any(p.name != ".lock" for p in each.out.iterdir())
        # Reports are replaced atomically, so re-evaluating into the same directory is safe.
        with RunDir(each.out, resume=existing, recipe_toml=each.to_toml(), check_recipe=False) as run_dir, tracked(each, run_dir):
            reports[judge] = each.runner()(each, run_dir, senders=senders) if senders else each.runner()(each, run_dir)
    if len(reports) > 1:
        from emojikit.support.io import atomic_write_text

        table = readers_markdown(reports)
        atomic_write_text(recipe.out / "readers.md", table)
        click.echo(table)
        click.echo(f"wrote {recipe.out / 'readers.md'}")
    if people is not None:
        from emojikit.evaluation.human_games import write_report

        path, text = write_report(people, recipe.out)
        click.echo(text)
        click.echo(f"wrote {path}")


@cli.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--seeds", default="0,1,2", show_default=True, help="Comma-separated seeds; each is one run of RECIPE.")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override a recipe value for every seed (repeatable).")
@click.option("--judge", "judges", multiple=True, help="Judge(s) for the held-out comparison (repeatable; default: retrieval and keywords).")
@click.option("--teacher", default="lexicon", show_default=True, help='Teacher played as a reference sender ("" for none).')
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Sweep directory (default: the recipe's out + -sweep).")
@friendly_errors
def sweep(recipe: Path, seeds: str, overrides, judges, teacher: str, out):
    """Run a GRPO RECIPE once per seed, then compare start and final checkpoints over seeds:
    mean, std between seeds and bootstrap 95 % intervals per judge, and held-out curves."""
    from emojikit.evaluation.sweep import parse_seeds, sweep as run_sweep

    run_sweep(recipe, parse_seeds(seeds), list(overrides), list(judges) or ["retrieval", "keywords"], teacher or None, out)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="The seed-spread file to write (JSON; [grpo] seed_spread names it).")
@friendly_errors
def spread(runs: tuple[Path, ...], out: Path):
    """Record the comparisons of several finished runs of one GRPO recipe (its seeds) as a seed-spread
    file: a later run's comparison, with [grpo] seed_spread = OUT, prints its figures beside theirs."""
    import json

    from emojikit.evaluation.spread import record
    from emojikit.support.io import atomic_write_text

    data = record(list(runs))
    atomic_write_text(out, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    click.echo(f"wrote {out}: {len(data['runs'])} runs, {len(data['columns'])} columns ({', '.join(data['columns'])})")


def mask_model(model: str) -> str:
    """The base model for `mask --model`: a checkpoint or run directory stands for the model it
    was trained from (its tokenizer is that model's); anything else must be a loadable model."""
    from emojikit.api.errors import ConfigError
    from emojikit.stages.runs import checkpoint_base_model, is_checkpoint_dir, is_run_dir, resolve_checkpoint
    from emojikit.support.bundled import model_problem

    path = Path(model)
    if is_checkpoint_dir(path) or is_run_dir(path):
        checkpoint = resolve_checkpoint(model)
        base = checkpoint_base_model(Path(checkpoint))
        if base is None:
            raise ConfigError(f"--model {model}: a checkpoint that records no base model (trainer_state.json); pass the model it was trained from")
        click.echo(f"emojikit: binding to {base}, the model {checkpoint} was trained from", err=True)
        model = base
    if (problem := model_problem(model, "--model")) is not None:
        raise ConfigError(problem)
    return model


def repair_eval(recipe_path: Path, states: Path, senders, judge, overrides, out, conflicting) -> None:
    """`eval --repair-states`: the senders (checkpoints, base, own, repeat, teacher:NAME) on the states' turn 2."""
    from emojikit.api.errors import ConfigError
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation.repair import evaluate_repair, read_states, write_repair_report
    from emojikit.stages.runs import RunDir

    if conflicting:
        raise ConfigError("--repair-states plays the states' targets: leave out --targets, -n and --human-games")
    read_states(states)  # a bad file fails before any model loads
    recipe = load_recipe(recipe_path, list(overrides), choices={"judge": judge}, settings={"out": str(out)} if out else {}, flags={"out": "--out"})
    existing = recipe.out.is_dir() and any(p.name != ".lock" for p in recipe.out.iterdir())
    with RunDir(recipe.out, resume=existing, recipe_toml=recipe.to_toml(), check_recipe=False) as run_dir:
        results = evaluate_repair(recipe, states, list(senders), recipe.settings["eval"].temperature, run_dir.path)
        click.echo(write_repair_report(results, run_dir.path))
    click.echo(f"wrote {recipe.out / 'repair.md'} and repair.json")


@cli.command("repair-states")
@click.option("--recipe", "recipe_path", default="recipes/eval.toml", show_default=True, type=click.Path(path_type=Path), callback=shipped_recipe, help="Recipe giving the backend, decoder, judge, reward, [game] and the [eval] temperature.")
@click.option("--checkpoint", default="base", show_default=True, help='The sender whose first-turn misses become the states (the SFT checkpoint), "base" or teacher:NAME.')
@click.option("--targets", type=click.Path(path_type=Path), default=None, help="Held-out targets (as eval reads them; default: the recipe's prompt source).")
@click.option("-n", "n_targets", type=click.IntRange(min=1), default=None, help="Play only the first N targets (512 from the prompt source).")
@click.option("--judge", default=None, help="Judge component instead of the recipe's (states are per judge: its wrong guesses).")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE")
@click.option("--out", "states_file", required=True, type=click.Path(path_type=Path), help="The states file to write (JSONL; never over an existing one).")
@friendly_errors
def repair_states(recipe_path: Path, checkpoint: str, targets, n_targets, judge, overrides, states_file: Path):
    """Make a repair benchmark: play the 2-turn game once with CHECKPOINT at the evaluation
    temperature and save its first-turn misses with the judge's wrong guesses."""
    import tempfile

    from emojikit.api.errors import ConfigError
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation.repair import make_states, states_targets

    from emojikit.evaluation.repair import resolve_sender

    resolve_sender(checkpoint)  # a checkpoint or run directory, base or teacher:NAME; one line otherwise
    if Path(states_file).exists():
        raise ConfigError(f"--out {states_file}: already exists; repair states are made once and reused (choose another name)")
    recipe = load_recipe(recipe_path, list(overrides), choices={"judge": judge})
    temperature = recipe.settings["eval"].temperature if "eval" in recipe.settings else 0.3
    with tempfile.TemporaryDirectory(prefix="emojikit-states-") as scratch:
        chosen = states_targets(recipe, targets, n_targets, Path(scratch))
        header = make_states(recipe, checkpoint, chosen, states_file, temperature, Path(scratch))
    click.echo(f"{header['states']} states ({header['played']} targets played, {header['first_turn_wins']} first-turn wins, "
               f"{header['own_repair_wins']} repaired by the sender's own turn 2) -> {states_file}")


@cli.command()
@click.option("--model", default="bundled:smollm2-135m-instruct", show_default=True, help="Model whose tokenizer the mask binds to (bundled:, a local path, or a cached hub id); a checkpoint or run directory means the model it was trained from.")
@click.option("--export", "export", type=click.Path(path_type=Path), default=None, help="Write every reachable state's allowed tokens to this .npz file.")
@click.option("--decoder", "decoder_name", default="emoji-mask", show_default=True, help="A decoder that reports its binding (BindingReport).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="A decoder setting, e.g. --set separator=' ' (repeatable).")
@friendly_errors
def mask(model: str, export: Path | None, decoder_name: str, overrides: tuple[str, ...]):
    """Bind the emoji-mask decoder to MODEL's tokenizer and print its size and build times."""
    from emojikit.composition.assembly import build_component
    from emojikit.api.components import BindingReport
    from emojikit.api.errors import ConfigError
    from emojikit.composition.recipe import parse_override

    if export is not None:
        from emojikit.api.errors import OutputError
        from emojikit.support.io import check_writable

        if export.is_dir():  # named now, not by the temporary file beside it after the binding work
            raise OutputError(f"--export {export}: is a directory, expected a file to write (e.g. {export / 'mask.npz'})")
        check_writable(export.parent, "the --export location")  # before the binding work
    settings = {}
    for text in overrides:
        keys, value = parse_override(text)
        if len(keys) != 1:
            raise ConfigError(f"--set {text}: expected KEY=VALUE, a setting of the decoder")
        settings[keys[0]] = value
    model = mask_model(model)
    decoder = build_component("decoder", decoder_name, settings)
    if not isinstance(decoder, BindingReport):
        raise ConfigError(f"decoder {decoder_name!r} does not report a binding (it has no binding_report)")
    for label, value in decoder.binding_report(model, export):
        click.echo(f"{label:<34} {value}")


@cli.command()
@click.option("--recipe", "recipe_path", default=None, type=click.Path(path_type=Path), help="A grpo, rft or eval recipe giving the components and [game] (default: recipes/grpo.toml if present, else each component's defaults).")
@click.option("--message", default=None, help="The message to convey (default: a random one from the prompt source).")
@click.option("--checkpoint", default=None, help='A sender checkpoint or run directory (runs/grpo: its final checkpoint), or "base" (default: the newest trained sender under runs/, else base).')
@click.option("--backend", default=None, help="Backend instead of the recipe's (default config).")
@click.option("--decoder", default=None, help="Decoder instead of the recipe's.")
@click.option("--judge", default=None, help="Judge instead of the recipe's, e.g. retrieval or local-lm.")
@click.option("--reward", default=None, help="Reward instead of the recipe's.")
@click.option("--max-turns", type=click.IntRange(1, 16), default=None)
@click.option("--temperature", type=click.FloatRange(min=0.0, max=MAX_TEMPERATURE), default=0.7, show_default=True)
@click.option("--seed", type=click.IntRange(0, SEED_MAX), default=None, help="Seed for the message choice and sampling (default: random).")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override a recipe value (repeatable).")
@click.option("--human", is_flag=True, help="You are the guesser: type a guess per line (stdin) after each emoji turn; a score at the end.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the turns: every turn, the judge's pool size and the reward's parts.")
@friendly_errors
def play(recipe_path, message, checkpoint, backend, decoder, judge, reward, max_turns, temperature, seed, overrides, human, as_json):
    """Watch the sender and the judge play one message, turn by turn (or guess yourself with --human)."""
    from emojikit.ui.interactive import default_sender, watch

    if message is not None and not message.strip():  # before anything is printed: the error is the only line
        raise click.BadParameter("empty message; pass some text, or leave --message out for a random one", param_hint="'--message'")
    checkpoint = default_sender(checkpoint, say=lambda m: click.echo(m, err=True))
    if recipe_path is None and Path("recipes/grpo.toml").exists():
        recipe_path = Path("recipes/grpo.toml")
    choices = {"backend": backend, "decoder": decoder, "judge": judge, "reward": reward}
    if human:
        from emojikit.ui.interactive import run_human_play

        if judge:
            raise click.UsageError("--judge has no effect with --human: you are the judge")
        if as_json:
            raise click.UsageError("--json is for watching a game; with --human, the score line is the result")
        choices.pop("judge")
        run_human_play(recipe_path, message=message, checkpoint=checkpoint, choices=choices, overrides=overrides, max_turns=max_turns, temperature=temperature, seed=seed, stream=sys.stdin, echo=click.echo)
        return
    watch(recipe_path, message=message, checkpoint=checkpoint, choices=choices, overrides=overrides, max_turns=max_turns, temperature=temperature, seed=seed, echo=click.echo,
          as_json=as_json)


@cli.command()
@click.option("--checkpoint", default=None, help='A sender checkpoint or run directory (runs/grpo: its final checkpoint), or "base" for the start model (default: the newest trained sender under runs/, else base).')
@click.option("--recipe", "recipe_path", default=None, type=click.Path(path_type=Path), help="Recipe whose [backend] and [decoder] to use (default: recipes/grpo.toml if present, else each component's defaults).")
@click.option("--backend", default=None, help="Backend instead of the recipe's (default config).")
@click.option("--decoder", default=None, help="Decoder instead of the recipe's, e.g. none to see the unmasked model.")
@click.option("--max-emoji", type=click.IntRange(1, 32), default=None, help="Most emoji per answer (the decoder's max_emoji).")
@click.option("--temperature", type=click.FloatRange(min=0.0, max=MAX_TEMPERATURE), default=0.7, show_default=True)
@click.option("--seed", type=click.IntRange(0, SEED_MAX), default=None, help="Sampling seed (default: random).")
@click.option("--set", "overrides", multiple=True, metavar="TABLE.KEY=VALUE", help="Override a recipe value (repeatable).")
@friendly_errors
def chat(checkpoint, recipe_path, backend, decoder, max_emoji, temperature, seed, overrides):
    """Chat with the sender: it answers every line of stdin with emoji (a pipe works too)."""
    from emojikit.ui.interactive import default_sender, run_chat

    checkpoint = default_sender(checkpoint, say=lambda m: click.echo(m, err=True))
    run_chat(recipe_path, checkpoint=checkpoint, backend=backend, decoder=decoder, overrides=overrides, max_emoji=max_emoji, temperature=temperature, seed=seed, stream=sys.stdin, echo=click.echo)


@cli.command()
@click.option("--checkpoint", "checkpoints", multiple=True, help='A sender checkpoint or run directory (its final checkpoint), or "base" (repeatable); the page offers each by a short id, never by path.')
@click.option("--recipe", "recipe_path", default=None, type=click.Path(path_type=Path), help="A grpo or eval recipe giving the components, [game] and held-out targets (default: recipes/grpo.toml).")
@click.option("--judge", "judges", multiple=True, help="Judge(s) the page offers for Send and Watch (default: the recipe's).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; anything but loopback prints a warning.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--dir", "serve_dir", type=click.Path(path_type=Path), default=Path("runs/serve"), show_default=True, help="Where human_games.jsonl is appended.")
@click.option("--runs", "runs_root", type=click.Path(path_type=Path), default=Path("runs"), show_default=True, help="Run directories the Runs mode shows.")
@click.option("--temperature", default=0.7, show_default=True, help="Sender temperature.")
@friendly_errors
def serve(checkpoints, recipe_path, judges, host, port, serve_dir, runs_root, temperature):
    """The game in a web page: guess a model's emoji, send your own, watch, browse runs."""
    from emojikit.ui.web.app import serve as run_server

    run_server(
        recipe_path=recipe_path, checkpoints=list(checkpoints) or ["base"], judges=list(judges), serve_dir=serve_dir,
        runs_root=runs_root, host=host, port=port, temperature=temperature, echo=click.echo, warn=lambda m: click.echo(m, err=True),
    )


@cli.command("inspect")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--step", type=int, default=None, help="Only episodes of this training step.")
@click.option("--target", default=None, help="Only episodes whose target contains this text (case-insensitive).")
@click.option("--worst", type=click.IntRange(1), default=None, help="The N lowest-reward episodes, worst first.")
@click.option("--best", type=click.IntRange(1), default=None, help="The N highest-reward episodes, best first.")
@friendly_errors
def inspect_episodes(run_dir, step, target, worst, best):
    """Browse a run's episodes (episodes.jsonl): target, emoji, guesses, similarities, reward."""
    from emojikit.ui.inspect_run import inspect_lines

    for line in inspect_lines(run_dir, step=step, target=target, worst=worst, best=best):
        click.echo(line)


@cli.command()
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Report directory (default: RUN/report).")
@click.option("--examples", type=click.IntRange(min=0), default=3, show_default=True, help="Best and worst episodes of the last step to show.")
@friendly_errors
def report(run_dir, out, examples):
    """PNG plots of reward, similarity, success rate, KL and turns over steps, and report.md."""
    from emojikit.ui.inspect_run import write_report

    path, plots = write_report(run_dir, out, examples)
    if plots:
        click.echo(f"wrote {path} and {len(plots)} plots ({', '.join(p.name for p in plots)})")
    else:
        data_run = (Path(run_dir) / "data_stats.json").exists()  # write_report checked it is a run directory
        click.echo(f"wrote {path} " + ("(a data run: its data_stats.json as a table)" if data_run else "(no training metrics to plot)"))


@cli.command("export")
@click.argument("checkpoint", metavar="CHECKPOINT")
@click.argument("out", metavar="OUT", type=click.Path(path_type=Path))
@click.option("--merged/--adapter", default=True, show_default=True, help="The LoRA merged into the base (a plain transformers folder), or a plain PEFT adapter.")
@click.option("--push", "push_to", metavar="REPO_ID", default=None, help="Then upload OUT to this Hugging Face Hub repository (token from HF_TOKEN).")
@click.option("--public", is_flag=True, help="With --push: create the repository public (default private).")
@friendly_errors
def export_command(checkpoint, out, merged, push_to, public):
    """Export a trained sender (a checkpoint, a run directory's final one, or a tinker:// path) for use without emojikit, with a model card."""
    from emojikit.export.export import export

    export(checkpoint, out, merged=merged, push_to=push_to, public=public, echo=click.echo)


def main() -> None:
    warnings.showwarning = _one_line_warning
    cli(prog_name="emojikit")


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """emojikit's own warnings (a plugin that failed to load, a name in EMOJIKIT_PLUGINS that is
    not installed) as one line a person reads; a library's keep Python's format."""
    if _emojikit_file(Path(filename)):
        print(f"emojikit: warning: {message}", file=file or sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _emojikit_file(path: Path) -> bool:
    """Whether `path` is emojikit's code or a built-in plugin's: under the emojikit package, the
    clone's plugins/ folder, or an installed emojikit_<name> package beside it."""
    path, package = path.resolve(), Path(__file__).resolve().parents[1]
    if path.is_relative_to(package) or path.is_relative_to(package.parent / "plugins"):
        return True
    return path.is_relative_to(package.parent) and path.relative_to(package.parent).parts[0].startswith("emojikit_")


if __name__ == "__main__":
    main()
