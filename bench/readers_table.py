"""Paired gains of RL senders over their start, under several readers, from `emojikit eval` reports.

Each eval.json holds the same held-out targets played by the start, the RL seeds, a control and
the teacher under one judge (same seed, same pool). For every judge this prints success,
first-turn success and repair rate per sender; the RL seeds' mean and spread (std between seeds);
each seed's paired gain over the start with its exact McNemar p; the pooled paired test (all seeds'
target-level outcomes against the start's, McNemar on the pooled discordant pairs); and the
control's gain. The generic share comes from the same reports. Beside success, the reader's
first-turn belief in the target (mean log p(target | first answer) over its pool, logged per turn by
a `TargetBelief` judge) and each sender's paired shift of it over the start with a 95 % interval: it
moves with every emoji, also where the guess stays wrong, so it sees smaller changes than success.

    python bench/readers_table.py runs/rl/eval-keywords/eval.json runs/rl/eval-retrieval/eval.json \
        --start runs/sft --seeds runs/rl/grpo-seed0 runs/rl/grpo-seed1 runs/rl/grpo-seed2 --control runs/rl/sft-control
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from emojikit.evaluation.repair import mcnemar_exact, paired_comparison


def first_turn_wins(entry: dict) -> list[bool]:
    return [bool(ep["success"]) and ep["n_turns"] == 1 for ep in entry["per_target"]]


def first_turn_beliefs(entry: dict) -> list:
    """Per target, the judge's log-belief in it after the first answer (None where it said none)."""
    return [ep["turns"][0].get("target_logprob") if ep.get("turns") else None for ep in entry["per_target"]]


def belief_shift(entry: dict, base: dict) -> dict:
    """Mean first-turn log-belief of a sender and its paired shift over the start's, with the
    half-width of a 95 % interval (normal approximation over targets); {} without beliefs."""
    pairs = [(a, b) for a, b in zip(first_turn_beliefs(entry), first_turn_beliefs(base)) if a is not None and b is not None]
    if len(pairs) < 2:
        return {}
    diffs = [a - b for a, b in pairs]
    return {"belief": statistics.fmean(a for a, _ in pairs), "belief_shift": statistics.fmean(diffs),
            "belief_ci": 1.96 * statistics.stdev(diffs) / len(diffs) ** 0.5}


def find(checkpoints: dict, ref: str) -> tuple[str, dict]:
    """The report's entry for a checkpoint given as a run directory or a checkpoint path."""
    for name, entry in checkpoints.items():
        if name == ref or name.startswith(ref.rstrip("/") + "/"):
            return name, entry
    raise SystemExit(f"{ref}: not among the report's checkpoints ({', '.join(checkpoints)})")


def judge_rows(report: dict, start: str, seeds: list[str], control: str | None) -> dict:
    checkpoints = report["checkpoints"]
    _, base = find(checkpoints, start)
    start_wins = base["per_target_success"]
    rows = {"start": base["masked"]}
    start_belief = belief_shift(base, base).get("belief")
    gains, first_gains, a_only, b_only = [], [], 0, 0
    per_seed = []
    for ref in seeds:
        _, entry = find(checkpoints, ref)
        paired = paired_comparison(entry["per_target_success"], start_wins)
        first = paired_comparison(first_turn_wins(entry), first_turn_wins(base))
        a_only, b_only = a_only + paired["a_only"], b_only + paired["b_only"]
        gains.append(paired["difference"])
        first_gains.append(first["difference"])
        per_seed.append({"ref": ref, **entry["masked"], "gain": paired["difference"], "p": paired["mcnemar_p"], "first_turn_gain": first["difference"],
                         **belief_shift(entry, base)})
    out = {"targets": report["targets"], "judge": report["judge"], "start": {**base["masked"], "belief": start_belief}, "seeds": per_seed,
           "gain_mean": statistics.fmean(gains), "gain_std": statistics.pstdev(gains), "first_turn_gain_mean": statistics.fmean(first_gains),
           "pooled": {"rl_only": a_only, "start_only": b_only, "mcnemar_p": mcnemar_exact(a_only, b_only)}}
    if control and any(n == control or n.startswith(control.rstrip("/") + "/") for n in checkpoints):  # a report may leave it out
        _, entry = find(checkpoints, control)
        out["control"] = {**entry["masked"], **{k: v for k, v in paired_comparison(entry["per_target_success"], start_wins).items() if k in ("difference", "mcnemar_p")},
                          **belief_shift(entry, base)}
    teacher = next((e for n, e in checkpoints.items() if n.startswith("teacher:")), None)
    if teacher:
        out["teacher"] = {**teacher["masked"], **belief_shift(teacher, base)}
    return out


def markdown(rows: dict) -> str:
    lines = []
    for judge, r in rows.items():
        lines += [f"### `{judge}`: {r['targets']} targets", "",
                  "| sender | success | first turn | repair rate | generic share | paired gain over the start (McNemar p) | first-turn log-belief (shift over the start, 95 % CI) |",
                  "|---|---|---|---|---|---|---|"]
        cell = lambda m: f"{m['success_rate']:.3f} | {m['first_turn_success']:.3f} | {m['repair_rate']:.3f} | {m.get('generic_share', float('nan')):.2f}"
        belief = lambda m: "" if m.get("belief") is None else f"{m['belief']:.2f}" + (f" ({m['belief_shift']:+.2f} ± {m['belief_ci']:.2f})" if "belief_shift" in m else "")
        lines.append(f"| start | {cell(r['start'])} | | {belief(r['start'])} |")
        for s in r["seeds"]:
            lines.append(f"| {s['ref']} | {cell(s)} | {s['gain']:+.3f} (p {s['p']:.2g}) | {belief(s)} |")
        succ = [s["success_rate"] for s in r["seeds"]]
        lines.append(f"| RL, mean (std) of {len(succ)} seeds | {statistics.fmean(succ):.3f} ({statistics.pstdev(succ):.3f}) | "
                     f"{statistics.fmean(s['first_turn_success'] for s in r['seeds']):.3f} | {statistics.fmean(s['repair_rate'] for s in r['seeds']):.3f} | | "
                     f"{r['gain_mean']:+.3f} (std {r['gain_std']:.3f}); pooled p {r['pooled']['mcnemar_p']:.2g} ({r['pooled']['rl_only']} vs {r['pooled']['start_only']}) | "
                     + (f"shift {statistics.fmean(s['belief_shift'] for s in r['seeds']):+.2f} (std {statistics.pstdev([s['belief_shift'] for s in r['seeds']]):.2f}) |"
                        if all("belief_shift" in s for s in r["seeds"]) else " |"))
        if "control" in r:
            c = r["control"]
            lines.append(f"| equal-compute SFT control | {cell(c)} | {c['difference']:+.3f} (p {c['mcnemar_p']:.2g}) | {belief(c)} |")
        if "teacher" in r:
            lines.append(f"| teacher | {cell(r['teacher'])} | | {belief(r['teacher'])} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="eval.json files, one per judge")
    parser.add_argument("--start", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--control")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = {}
    for path in args.reports:
        if not path.is_file():
            raise SystemExit(f"{path}: no such report (emojikit eval writes OUT/JUDGE/eval.json)")
        report = json.loads(path.read_text(encoding="utf-8"))
        if report["judge"] in rows:
            raise SystemExit(f"{path}: a second report of judge {report['judge']}; give one per judge")
        rows[report["judge"]] = judge_rows(report, args.start, args.seeds, args.control)
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))


if __name__ == "__main__":
    main()
