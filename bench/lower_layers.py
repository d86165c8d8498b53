"""A GRPO step's two scoring passes with the layers below the adapter run once against run twice.

    python bench/lower_layers.py --checkpoint runs/sft     # the main job's RL step from its SFT start
    python bench/lower_layers.py --checkpoint runs/sft-long --lora-layers 10   # from an adapter in every layer, the last 10 trained
    python bench/lower_layers.py --targets 4 --rounds 1    # smoke run

With LoRA in the last `lora_layers` layers (recipes/sft.toml: 10 of SmolLM2's 30), the layers
below carry no adapter, so the KL's reference pass and the training pass compute the same lower
layers for the same batch. The local backend keeps their output from the reference pass and the
training pass replays it (`frozen_layers.LowerLayers`); the peer is the same code with that off
(every pass runs every layer). Each round plays one GRPO step's groups as recipes/grpo.toml does
(its targets, group size, temperature, 2 turns, the `keywords` judge), then runs the step's
scoring and update (`grpo.fold_kl` then `grpo.train`) on both sides from the same weights,
alternating which goes first; it prints the seconds of each pass and checks that both sides
computed the same KL and loss.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402
from rollouts import build  # noqa: E402

RECIPE = Path("recipes/grpo.toml")


def run(args) -> dict:
    import torch

    from emojikit.api.policy import SamplingParams
    from emojikit.composition.recipe import load_recipe
    from emojikit.play.targets import read_targets
    from emojikit.training.grpo import fold_kl, group_datums, play_groups, train

    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = load_recipe(RECIPE, [])
    g, game = recipe.settings["grpo"], recipe.settings["game"]
    trained_layers = {"lora_layers": args.lora_layers} if args.lora_layers else {}
    policy = build("backend", "local", args.seed, init_from=args.checkpoint, **trained_layers)  # as GRPO starts: the checkpoint trains, a copy is the reference
    decoder = build("decoder", "emoji-mask", args.seed)
    judge = build("judge", "keywords", args.seed, distractors=recipe.components["judge"].config.distractors)
    reward = build("reward", "similarity", args.seed)
    targets = read_targets(Path(args.targets_file))
    judge.add_candidates([m.text for m in targets])
    start = [p.detach().clone() for p in policy.trainable]
    sides = ("run once", "run twice")
    seconds = {side: {"reference": [], "training": []} for side in sides}
    same, datums_per_step = True, []
    for round_ in range(args.rounds):
        batch = targets[round_ * args.targets : (round_ + 1) * args.targets]
        sampling = SamplingParams(max_tokens=game.max_new_tokens, temperature=g.temperature, seed=args.seed * 100_003 + round_)
        groups = play_groups(policy, decoder, judge, reward, batch, game, sampling, g.group_size)
        per_group, _ = group_datums(groups, g, game.max_new_tokens, None, game.max_turns)
        datums_per_step.append(sum(len(group) for group in per_group))
        results = {}
        for side in (sides if round_ % 2 == 0 else sides[::-1]):
            with torch.no_grad():
                for p, p0 in zip(policy.trainable, start):
                    p.copy_(p0)
            policy.optimizer = None  # both sides take the same first Adam step
            policy.lower_layers.enabled = side == "run once"
            step_groups = copy.deepcopy(per_group)  # fold_kl writes the KL into the advantages
            step = [d for group in step_groups for d in group]
            began = time.perf_counter()
            kl = fold_kl(policy, step, temperature=g.temperature, decoder=decoder, kl_coef=g.kl_coef, center=g.kl_center)
            middle = time.perf_counter()
            row = train(policy, step_groups, g, decoder=decoder)
            seconds[side]["reference"].append(middle - began)
            seconds[side]["training"].append(time.perf_counter() - middle)
            results[side] = (kl, row["loss"])
        same &= results["run once"] == results["run twice"]
    policy.lower_layers.enabled = True
    median = {side: {phase: statistics.median(v) for phase, v in phases.items()} for side, phases in seconds.items()}
    total = {side: median[side]["reference"] + median[side]["training"] for side in sides}
    return {
        "config": {"checkpoint": args.checkpoint, "targets_per_step": args.targets, "group_size": g.group_size, "turns": game.max_turns,
                   "datums_per_step": datums_per_step, "rounds": args.rounds, "threads": torch.get_num_threads(),
                   "lora_layers": args.lora_layers, "layers_run_once": policy.lower_layers.depth},
        "machine": machine(),
        **{side: {"reference_seconds": round(median[side]["reference"], 2), "training_seconds": round(median[side]["training"], 2),
                  "both_seconds": round(total[side], 2), "all": {k: [round(s, 2) for s in v] for k, v in seconds[side].items()}} for side in sides},
        "ratio": round(total["run once"] / total["run twice"], 3),
        "same_kl_and_loss": same,
    }


def main(argv=None) -> None:
    parser = bench_parser(__doc__, threads=0)
    parser.add_argument("--checkpoint", default="runs/sft", help="the GRPO start: an SFT checkpoint trained with lora_layers (recipes/sft.toml's)")
    parser.add_argument("--targets-file", default="recipes/targets/heldout.jsonl", help="the step's targets, drawn in turn")
    parser.add_argument("--targets", type=int, default=16, help="targets per step (recipes/grpo.toml's batch_size)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--lora-layers", type=int, default=None, help="train the checkpoint's adapter in the last N layers only (for a start with an adapter in every layer, as recipes/sft-long.toml's)")
    args = parser.parse_args(argv)
    result = run(args)
    if print_header(result, args.json):
        return
    print("| lower layers | reference pass (s, median) | training pass (s, median) | both |")
    print("|---|---|---|---|")
    for side in ("run once", "run twice"):
        print(f"| {side} | {result[side]['reference_seconds']} | {result[side]['training_seconds']} | {result[side]['both_seconds']} |")
    print(f"ratio {result['ratio']} (once / twice); both sides computed the same KL and loss: {result['same_kl_and_loss']}")


if __name__ == "__main__":
    main()
