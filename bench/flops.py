"""Achieved matmul throughput of the local backend's training phases, against the machine's
matmul peak measured in the same run.

    python bench/flops.py                          # fp32 and (where the CPU has bf16 units) bf16 backends, a table
    python bench/flops.py --json
    python bench/flops.py --dtypes bfloat16 --rounds 1 --prompts 2 --batch 4   # smoke run

The peak: the best of a few float32 and bfloat16 matmuls of the model's own shapes and a square
one (torch.nn.functional.linear, the op every projection runs), timed before and after the
phases so a change in machine load shows as two different peaks. The machine's peak is the
faster of the two: bf16 on CPUs with bf16 matmul units, fp32 where bf16 is emulated (AVX2).

The work: FLOPs counted from the model's config and the batch's real token counts, as the
backend runs them: a prompt shared by a GRPO group (or the start every SFT chat shares) is run
once, padding is not counted (it is waste, and shows as a lower fraction of the peak). Per
token and layer the projections cost 2 x their parameters, LoRA 2 x r x (in + out) per wrapped
projection, attention 4 x (heads x head_dim) x context; the output head 2 x hidden x vocab at
each position whose logits are used. Backward: the frozen base and the head need the input
gradient only (1 x forward), LoRA input and weight gradients (2 x), attention 2 x.

Time, for the peak and the phases alike: with one torch thread the process's CPU seconds (so
other processes sharing the core lower neither); with more threads wall seconds (CPU seconds
would count every thread, spinning ones too), which needs an idle machine. Both are printed. Phases (each timed alone, median over rounds after a warm-up):
  sft        forward_backward("cross_entropy") + optim_step on `batch` SFT chats
  sampling   `prompts` x `completions` rows of up to `new_tokens` tokens at temperature 1
  reference  the KL's reference pass (compute_logprobs(reference=True, weighted_only=True))
  training   forward_backward("ppo") + optim_step on those samples (with --lora-layers, the layers
             below take their output from the reference pass, as in GRPO; not counted again)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MESSAGES, machine, parser as bench_parser, peak_rss_mb, print_header  # noqa: E402

SYSTEM = "Reply with 2-8 emoji only."  # emojikit.training.data.SYSTEM_PROMPT, the game's first turn
ANSWERS = ["🎉💼😄", "🐱🪴💥😾", "🍕🎬🛋️", "📝😫🧠", "✈️🗾🍣🎌", "🌧️☔😩", "🎂🎁👧🎉", "🔑🌳😟🔍"]
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PHASES = ("sft", "sampling", "reference", "training")


def clock() -> float:
    """CPU seconds of this process with one torch thread: the compute the phase received, so a
    second process time-sharing the core does not count against the phase or the peak. With
    more threads, wall seconds (see the module docstring)."""
    import torch

    return time.process_time() if torch.get_num_threads() == 1 else time.perf_counter()


# --- the machine's peak ----------------------------------------------------------------------


def matmul_peak(dtype, shapes, seconds: float = 0.4) -> dict:
    """GFLOP/s of F.linear (M x K input, N x K weight) per shape, each run for ~`seconds`."""
    import torch

    out = {}
    for m, k, n in shapes:
        x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
        torch.nn.functional.linear(x, w)
        calls, started = 0, clock()
        while clock() - started < seconds:
            torch.nn.functional.linear(x, w)
            calls += 1
        out[f"{m}x{k}x{n}"] = 2 * m * k * n * calls / (clock() - started) / 1e9
    return out


def peak_shapes(config) -> list[tuple[int, int, int]]:
    d, ff = config.hidden_size, config.intermediate_size
    return [(1024, d, ff), (1024, ff, d), (1024, d, d), (1024, 1024, 1024)]


# --- counting --------------------------------------------------------------------------------


class Shapes:
    """Per-token FLOP terms of a Llama-style decoder from its config."""

    def __init__(self, config, lora_rank: int, lora_layers: int | None = None):
        d = config.hidden_size
        head_dim = getattr(config, "head_dim", None) or d // config.num_attention_heads
        q, kv, ff = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim, config.intermediate_size
        io = {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d), "gate_proj": (d, ff), "up_proj": (d, ff), "down_proj": (ff, d)}
        self.layers = config.num_hidden_layers
        self.adapted = (lora_layers or self.layers) / self.layers  # backward runs through these layers only
        self.base_params = self.layers * sum(i * o for i, o in io.values())
        self.lora_params = self.adapted * self.layers * sum(lora_rank * (i + o) for i, o in io.values())
        self.attention_width = self.layers * q
        self.head = d * config.vocab_size

    def forward(self, contexts: list[int], lora: bool) -> dict[str, float]:
        """Forward FLOPs of tokens with these context lengths (keys attended, itself included)."""
        n = len(contexts)
        return {
            "base": 2.0 * self.base_params * n,
            "lora": 2.0 * self.lora_params * n if lora else 0.0,
            "attention": 4.0 * self.attention_width * sum(contexts),
        }

    def head_flops(self, positions: int) -> float:
        return 2.0 * self.head * positions


def training_flops(forward: dict[str, float], head: float, adapted: float = 1.0, lower_replayed: bool = False) -> float:
    """Forward + backward: frozen base and head input gradients only (1x), LoRA and attention 2x;
    the backward stops below the lowest adapted layer (`adapted`: their share of the layers).
    `lower_replayed`: the layers below ran in the reference pass, not again (frozen_layers.py)."""
    forward_share = adapted if lower_replayed else 1.0
    return (forward_share + adapted) * forward["base"] + 3 * forward["lora"] + (forward_share + 2 * adapted) * forward["attention"] + 2 * head


def scored_tokens(policy, datums) -> tuple[list[int], int]:
    """(context length of every token run, positions projected through the head) when
    forward_backward / compute_logprobs(weighted_only=True) score `datums`: per micro-batch, a
    prompt shared by several datums (or the start all share) runs once (scoring.target_logprobs);
    with row workers (`parallel`), once per part of a micro-batch."""
    from emojikit_local.sampling import MIN_COMMON_PREFIX, common_prefix_length
    from emojikit_local.scoring import prefix_split

    contexts, head = [], 0
    chunks = [[datums[batch[j]] for j in part] for batch in policy._micro_batches(datums) for part in policy._row_parts([datums[i] for i in batch])]
    for chunk in chunks:
        splits = [prefix_split(d) for d in chunk]
        prefixes = [tuple(d.model_input[:s]) for d, s in zip(chunk, splits)]
        if len(chunk) > 1 and min(splits) > 0 and len(set(prefixes)) < len(chunk):
            shared = splits
        elif len(chunk) > 1 and common_prefix_length(prefixes) >= MIN_COMMON_PREFIX:
            shared = [common_prefix_length(prefixes)] * len(chunk)
        else:
            shared = [0] * len(chunk)
        seen = set()
        for datum, split in zip(chunk, shared):
            prefix = tuple(datum.model_input[:split])
            if prefix not in seen:
                seen.add(prefix)
                contexts += range(1, split + 1)
            contexts += range(split + 1, len(datum.model_input) + 1)
            head += sum(1 for w in datum.weights if w != 0)
    return contexts, head


def sampling_tokens(groups) -> tuple[list[int], int]:
    """(contexts of the tokens run, head positions) of decode_batch: the start the distinct
    prompts share is prefilled once, the rest of each distinct prompt once (logits at its last
    position only), then every drawn token but a row's last is fed back one at a time, and every
    drawn token needed one row of logits."""
    from emojikit_local.sampling import MIN_COMMON_PREFIX, common_prefix_length

    distinct = list(dict.fromkeys(tuple(sample.prompt_tokens) for group in groups for sample in group))
    shared = min(common_prefix_length(distinct), min(len(p) for p in distinct) - 1) if len(distinct) > 1 else 0
    shared = shared if shared >= MIN_COMMON_PREFIX else 0
    contexts, head, seen = list(range(1, shared + 1)), 0, set()
    for group in groups:
        for sample in group:
            prompt = tuple(sample.prompt_tokens)
            if prompt not in seen:
                seen.add(prompt)
                contexts += range(shared + 1, len(prompt) + 1)
            fed = len(sample.tokens) - 1
            contexts += range(len(prompt) + 1, len(prompt) + 1 + fed)
            head += len(sample.tokens)
    return contexts, head


# --- the run ---------------------------------------------------------------------------------


def sft_datums(policy, args):
    from emojikit.training.sft import chat_datum, load_chats

    if args.train_file and args.train_file.exists():
        chats = load_chats(args.train_file, limit=args.batch)
    else:  # no data run: the bench's own messages, short emoji answers (the SFT data's shape)
        chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": MESSAGES[i % len(MESSAGES)]}, {"role": "assistant", "content": ANSWERS[i % len(ANSWERS)]}] for i in range(args.batch)]
    return [chat_datum(policy, chat) for chat in chats]


def measure(policy, shapes: Shapes, args) -> dict[str, dict]:
    from emojikit.api.policy import AdamParams, Datum, SamplingParams
    from emojikit.training.grpo import group_advantages

    sft = sft_datums(policy, args)
    prompts = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": MESSAGES[i % len(MESSAGES)]}] for i in range(args.prompts)]
    times = {name: [] for name in PHASES}
    flops: dict[str, list[float]] = {name: [] for name in times}
    extra: dict[str, list[float]] = {key: [] for key in ("sft_tokens_run", "sampled_tokens", "grpo_tokens_run", "sampler_gap_median", "sampler_gap_max", "ratio_max_deviation")}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        t, wall = clock(), time.perf_counter()
        policy.forward_backward(sft, "cross_entropy")
        policy.optim_step(AdamParams(learning_rate=1e-4))
        sft_s = (clock() - t, time.perf_counter() - wall)

        t, wall = clock(), time.perf_counter()
        groups = policy.sample(prompts, args.completions, SamplingParams(max_tokens=args.new_tokens, temperature=1.0, seed=round_))
        sampling_s = (clock() - t, time.perf_counter() - wall)
        datums = []
        for i, group in enumerate(groups):
            # a fixed spread of advantages: every group trains, whatever the samples are
            for sample, advantage in zip(group, group_advantages([float(j) for j in range(len(group))], normalize_std=True)):
                datums.append(Datum.from_sample(sample, advantage=advantage))

        t, wall = clock(), time.perf_counter()
        policy.compute_logprobs(datums, reference=True, weighted_only=True)
        reference_s = (clock() - t, time.perf_counter() - wall)

        t, wall, hits = clock(), time.perf_counter(), policy.lower_layers.hits
        out = policy.forward_backward(datums, "ppo")
        policy.optim_step(AdamParams(learning_rate=1e-5))
        training_s = (clock() - t, time.perf_counter() - wall)
        replayed = policy.lower_layers.hits > hits  # the layers below lora_layers came from the reference pass
        if round_ == 0:
            continue
        for name, seconds in (("sft", sft_s), ("sampling", sampling_s), ("reference", reference_s), ("training", training_s)):
            times[name].append(seconds)
        contexts, head = scored_tokens(policy, sft)
        flops["sft"].append(training_flops(shapes.forward(contexts, lora=True), shapes.head_flops(head), shapes.adapted))
        extra["sft_tokens_run"].append(len(contexts))
        contexts, head = sampling_tokens(groups)
        flops["sampling"].append(sum(shapes.forward(contexts, lora=True).values()) + shapes.head_flops(head))
        extra["sampled_tokens"].append(head)
        contexts, head = scored_tokens(policy, datums)
        # the reference is the start weights: no adapter runs
        flops["reference"].append(sum(shapes.forward(contexts, lora=False).values()) + shapes.head_flops(head))
        flops["training"].append(training_flops(shapes.forward(contexts, lora=True), shapes.head_flops(head), shapes.adapted, lower_replayed=replayed))
        extra["grpo_tokens_run"].append(len(contexts))
        for key in ("sampler_gap_median", "sampler_gap_max", "ratio_max_deviation"):
            if key in out.metrics:
                extra[key].append(out.metrics[key])
    rows = {name: {"seconds": statistics.median(c for c, _ in times[name]), "wall_seconds": statistics.median(w for _, w in times[name]), "gflop": statistics.fmean(flops[name]) / 1e9} for name in times}
    rows["extra"] = {key: (max(values) if "gap" in key or "deviation" in key else statistics.fmean(values)) for key, values in extra.items() if values}
    return rows


def run(args) -> dict:
    import torch

    from emojikit.support.bundled import SMOLLM2
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    peaks_before, peaks_after = {}, {}
    for dtype in args.dtypes:
        model, tokenizer = load_model_and_tokenizer(SMOLLM2)
        shapes_ = peak_shapes(model.config)
        if not peaks_before:
            peaks_before = {"float32": matmul_peak(torch.float32, shapes_), "bfloat16": matmul_peak(torch.bfloat16, shapes_)}
        config = LocalConfig(dtype=dtype, micro_batch_size=args.micro_batch_size, seed=args.seed, lora_layers=args.lora_layers, pack_rows=args.pack_rows,
                             prepack_weights=not args.no_prepack, parallel=args.parallel)
        policy = LocalPolicy(model, tokenizer, config, seed=args.seed)
        rows = measure(policy, Shapes(model.config, config.lora_rank, config.lora_layers), args)
        results.append((dtype, rows))
        del policy, model
    peaks_after = {"float32": matmul_peak(torch.float32, shapes_), "bfloat16": matmul_peak(torch.bfloat16, shapes_)}
    peak = {d: max(max(peaks_before[d].values()), max(peaks_after[d].values())) for d in ("float32", "bfloat16")}
    table = []
    clock_name = "cpu" if torch.get_num_threads() == 1 else "wall"
    for dtype, rows in results:
        for phase in PHASES:
            row = rows[phase]
            gflops = row["gflop"] / row["seconds"]
            table.append({
                "dtype": dtype, "phase": phase, "gflop": round(row["gflop"], 1), "cpu_seconds": round(row["seconds"], 3), "wall_seconds": round(row["wall_seconds"], 3),
                "gflop_per_s": round(gflops, 1), "clock": clock_name, "of_bf16_peak": round(gflops / peak["bfloat16"], 3), "of_fp32_peak": round(gflops / peak["float32"], 3),
                "of_machine_peak": round(gflops / max(peak.values()), 3),  # the faster dtype's: bf16 with bf16 units, else fp32
            })
        table[-1]["extra"] = {k: round(v, 6) for k, v in rows["extra"].items()}
    return {
        "machine": machine(),
        "config": {"threads": torch.get_num_threads(), "rounds": args.rounds, "sft_batch": args.batch, "prompts": args.prompts, "completions": args.completions, "new_tokens": args.new_tokens, "micro_batch_size": args.micro_batch_size, "lora_layers": args.lora_layers, "pack_rows": args.pack_rows, "prepack_weights": not args.no_prepack, "parallel": args.parallel},
        "peak_gflop_per_s": {d: round(v, 1) for d, v in peak.items()},
        "peaks_before": {d: {k: round(v, 1) for k, v in p.items()} for d, p in peaks_before.items()},
        "peaks_after": {d: {k: round(v, 1) for k, v in p.items()} for d, p in peaks_after.items()},
        "rows": table,
        "peak_rss_mb": round(peak_rss_mb()),
    }


def workload_arguments(parser) -> None:
    """The work `measure` times (the SFT batch, the GRPO prompts and samples) and the adapter's placement."""
    parser.add_argument("--batch", type=int, default=16, help="SFT chats per step")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--completions", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--lora-layers", type=int, help="the backend's lora_layers: LoRA in the last N decoder layers only (default: every layer)")
    parser.add_argument("--train-file", type=Path, default=Path("runs/data/sft_train.jsonl"), help="SFT chats (emojikit run recipes/data.toml); the bench's own messages when missing")


def main() -> None:
    parser = bench_parser(__doc__, threads=1)
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], help="the local backend's dtype setting(s) to measure (default: float32, and bfloat16 where the CPU has bf16 matmul units: emulated bf16 steps take minutes)")
    parser.add_argument("--rounds", type=int, default=3)
    workload_arguments(parser)
    parser.add_argument("--pack-rows", action="store_true", help="the backend's pack_rows: several SFT chats (or samples of one prompt) side by side in a row")
    parser.add_argument("--parallel", choices=("auto", "rows", "ops"), default="auto", help="the backend's parallel: each thread its own rows of a scoring or training pass, or every product split across the threads; auto: rows in float32, ops in bf16")
    parser.add_argument("--no-prepack", action="store_true", help="the backend's prepack_weights = false: bf16 products from plain weights (bench/prepack.py compares both in one run)")
    args = parser.parse_args()
    if args.dtypes is None:
        from emojikit_local.hardware import compute_dtype

        args.dtypes = ["float32"] + (["bfloat16"] if compute_dtype("auto", "cpu") == "bfloat16" else [])
    result = run(args)
    if print_header(result, args.json):
        return
    print(f"matmul peak (best of {', '.join(result['peaks_before']['float32'])}): fp32 {result['peak_gflop_per_s']['float32']} GFLOP/s, bf16 {result['peak_gflop_per_s']['bfloat16']} GFLOP/s")
    print(f"{'dtype':<9} {'phase':<10} {'GFLOP':>8} {'CPU s':>8} {'wall s':>8} {'GFLOP/s':>8} {'of bf16 peak':>13} {'of fp32 peak':>13} {'of machine peak':>16}")
    for row in result["rows"]:
        print(f"{row['dtype']:<9} {row['phase']:<10} {row['gflop']:>8.1f} {row['cpu_seconds']:>8.2f} {row['wall_seconds']:>8.2f} {row['gflop_per_s']:>8.1f} {row['of_bf16_peak']:>12.0%} {row['of_fp32_peak']:>12.0%} {row['of_machine_peak']:>15.0%}")
        if "extra" in row:
            print(f"          {row['extra']}")
    print(f"peak RSS: {result['peak_rss_mb']} MB")


if __name__ == "__main__":
    main()
