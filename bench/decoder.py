"""Constrained decoding benchmark on SmolLM2-135M-Instruct (CPU).

For each method (unconstrained, emoji-mask, the original union-of-token-ids mask, and
xgrammar with an alternation of the same emoji when it is installed) it samples batches of
chat prompts with a plain KV-cached loop and reports build time (first and cached), decode
throughput, the time spent on masks per step, and the fraction of invalid answers (checked
by the emoji-mask validator: 2-8 emoji of the RGI inventory, nothing else) at each
temperature, and how many samples were cut by the token limit mid-answer.

    python bench/decoder.py                      # table
    python bench/decoder.py --json               # one JSON object
    python bench/decoder.py --samples 64 --new-tokens 24 --methods emoji-mask,union
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from emojikit.support.bundled import SMOLLM2, cache_dir, load_tokenizer
from emojikit_emoji_mask.automaton import EmojiAutomaton
from emojikit_emoji_mask.binding import bind_graph
from emojikit_emoji_mask.constraint import EmojiConstraint
from emojikit_emoji_mask.decoder import EmojiMaskDecoder
from emojikit_emoji_mask.union import UnionMask

SYSTEM = "You answer every message with 2 to 8 emoji and nothing else."
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MESSAGES as PROMPTS  # noqa: E402
METHODS = ("unconstrained", "emoji-mask", "union", "xgrammar")


# --- maskers: one per method, each keeps per-row state for one batch ------------------------


class NoMask:
    def begin(self, batch_size: int) -> None:
        pass

    def apply(self, logits_B_V: torch.Tensor, tokens_left: int, finished_B: torch.Tensor) -> None:
        pass

    def accept(self, tokens_B: torch.Tensor, finished_B: torch.Tensor) -> None:
        pass


class ConstraintMask:
    """Any TokenConstraint with allowed_batch (emoji-mask, union)."""

    def __init__(self, constraint: Any):
        self.constraint = constraint
        self.states: list[Any] = []

    def begin(self, batch_size: int) -> None:
        self.states = [self.constraint.start()] * batch_size

    def apply(self, logits_B_V, tokens_left, finished_B) -> None:
        allowed_B_V = self.constraint.allowed_batch(self.states, [tokens_left] * len(self.states), width=logits_B_V.shape[-1])
        allowed_B_V[finished_B] = True
        logits_B_V.masked_fill_(~allowed_B_V, float("-inf"))

    def accept(self, tokens_B, finished_B) -> None:
        for row, (token, done) in enumerate(zip(tokens_B.tolist(), finished_B.tolist())):
            if not done:
                self.states[row] = self.constraint.advance(self.states[row], token)


class XGrammarMask:
    def __init__(self, compiled: Any, xgr: Any, vocab_size: int):
        self.compiled, self.xgr, self.vocab_size = compiled, xgr, vocab_size
        self.matchers: list[Any] = []

    def begin(self, batch_size: int) -> None:
        self.matchers = [self.xgr.GrammarMatcher(self.compiled) for _ in range(batch_size)]
        self.bitmask = self.xgr.allocate_token_bitmask(batch_size, self.vocab_size)

    def apply(self, logits_B_V, tokens_left, finished_B) -> None:
        self.bitmask.fill_(-1)
        for row, matcher in enumerate(self.matchers):
            if not finished_B[row] and not matcher.is_terminated():
                matcher.fill_next_token_bitmask(self.bitmask, row)
        self.xgr.apply_token_bitmask_inplace(logits_B_V, self.bitmask)

    def accept(self, tokens_B, finished_B) -> None:
        for row, (token, done) in enumerate(zip(tokens_B.tolist(), finished_B.tolist())):
            if not done and not self.matchers[row].is_terminated():
                self.matchers[row].accept_token(token)


# --- building each method ----------------------------------------------------------------


@dataclass
class Method:
    name: str
    masker: Any
    build_first_s: float
    build_cached_s: Optional[float]
    note: str = ""


def build_emoji_mask(tokenizer, decoder: EmojiMaskDecoder) -> Method:
    started = time.perf_counter()  # from scratch: automaton, token bytes, graph, distances
    EmojiConstraint(bind_graph(EmojiAutomaton(decoder.inventory, decoder.separator), tokenizer, None), 2, 8)
    first = time.perf_counter() - started
    bind_graph(decoder.automaton, tokenizer, decoder.cache_dir)  # make sure the disk cache exists
    started = time.perf_counter()  # what a later run pays: the graph comes from the disk cache
    graph = bind_graph(EmojiAutomaton(decoder.inventory, decoder.separator), tokenizer, decoder.cache_dir)
    constraint = EmojiConstraint(graph, 2, 8)
    cached = time.perf_counter() - started
    return Method("emoji-mask", ConstraintMask(constraint), first, cached, f"{graph.usable_tokens} usable tokens, {graph.n_nodes} boundary nodes")


def build_union(tokenizer, decoder: EmojiMaskDecoder) -> Method:
    started = time.perf_counter()
    union = UnionMask(tokenizer, decoder.inventory)
    return Method("union", ConstraintMask(union), time.perf_counter() - started, None, f"{len(union.token_ids)} token ids")


def build_xgrammar(tokenizer, decoder: EmojiMaskDecoder, vocab_size: int) -> Optional[Method]:
    try:
        import xgrammar as xgr
    except ImportError:
        return None
    alternatives = " | ".join(json.dumps(seq, ensure_ascii=False) for seq in sorted(decoder.inventory, key=len, reverse=True))
    grammar = f"root ::= e e e? e? e? e? e? e?\ne ::= {alternatives}\n"
    started = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[tokenizer.eos_token_id])
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar)
    first = time.perf_counter() - started
    return Method("xgrammar", XGrammarMask(compiled, xgr, vocab_size), first, None, "alternation of the same emoji, 2-8 times")


# --- sampling ------------------------------------------------------------------------------


@dataclass
class Tally:
    decode_steps: int = 0  # rows x steps
    decode_s: float = 0.0
    mask_s: float = 0.0
    steps: int = 0
    answer_tokens: int = 0
    samples: dict[float, int] = field(default_factory=dict)
    invalid: dict[float, int] = field(default_factory=dict)
    cut: dict[float, int] = field(default_factory=dict)
    examples: dict[float, list[str]] = field(default_factory=dict)


def sample_batch(model, batch: dict, masker: Any, temperature: float, max_new: int, eos: int, generator: torch.Generator, tally: Tally) -> list[tuple[list[int], bool]]:
    """(tokens without EOS, ended with EOS) per row, with a plain KV-cached loop."""
    input_ids_B_T, attention_B_T = batch["input_ids"], batch["attention_mask"]
    batch_size = input_ids_B_T.shape[0]
    position_B_T = (attention_B_T.cumsum(-1) - 1).clamp(min=0)
    masker.begin(batch_size)
    finished_B = torch.zeros(batch_size, dtype=torch.bool)
    ended_B = torch.zeros(batch_size, dtype=torch.bool)
    rows: list[list[int]] = [[] for _ in range(batch_size)]
    with torch.inference_mode():
        out = model(input_ids=input_ids_B_T, attention_mask=attention_B_T, position_ids=position_B_T, use_cache=True)
        past, logits_B_V = out.past_key_values, out.logits[:, -1, :].float()
        started = time.perf_counter()
        for step in range(max_new):
            t0 = time.perf_counter()
            masker.apply(logits_B_V, max_new - step, finished_B)
            tally.mask_s += time.perf_counter() - t0
            probs_B_V = torch.softmax(logits_B_V / temperature, dim=-1)
            tokens_B = torch.multinomial(probs_B_V, 1, generator=generator).squeeze(-1)
            tokens_B = torch.where(finished_B, torch.full_like(tokens_B, eos), tokens_B)
            t0 = time.perf_counter()
            masker.accept(tokens_B, finished_B)
            tally.mask_s += time.perf_counter() - t0
            for row, token in enumerate(tokens_B.tolist()):
                if not finished_B[row]:
                    if token == eos:
                        ended_B[row] = True
                    else:
                        rows[row].append(token)
            finished_B |= tokens_B == eos
            tally.steps += 1
            tally.decode_steps += batch_size
            if finished_B.all() or step == max_new - 1:
                break
            attention_B_T = torch.cat([attention_B_T, torch.ones(batch_size, 1, dtype=attention_B_T.dtype)], dim=1)
            position_B_T = position_B_T[:, -1:] + 1
            out = model(input_ids=tokens_B[:, None], attention_mask=attention_B_T, position_ids=position_B_T, past_key_values=past, use_cache=True)
            past, logits_B_V = out.past_key_values, out.logits[:, -1, :].float()
        tally.decode_s += time.perf_counter() - started
    return [(row, bool(ended)) for row, ended in zip(rows, ended_B.tolist())]


def load_model():
    """The SmolLM2 sender: the local backend's cached fp32 copy when that plugin is present,
    else dequantized from the bundled GGUF (slow: ~20 s)."""
    try:
        from emojikit.support.models import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(SMOLLM2, device="cpu")
    except ImportError:
        from transformers import AutoModelForCausalLM

        from emojikit.support.bundled import smollm2_gguf

        directory, filename = smollm2_gguf()
        model = AutoModelForCausalLM.from_pretrained(str(directory), gguf_file=filename).eval()
        tokenizer = load_tokenizer(SMOLLM2)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def run(args) -> dict:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model()
    vocab_size = model.get_output_embeddings().weight.shape[0]
    eos = tokenizer.eos_token_id
    decoder = EmojiMaskDecoder(2, 8, cache_dir=cache_dir("masks"))
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
    methods: list[Method] = []
    skipped: dict[str, str] = {}
    for name in wanted:
        if name == "unconstrained":
            methods.append(Method(name, NoMask(), 0.0, None))
        elif name == "emoji-mask":
            methods.append(build_emoji_mask(tokenizer, decoder))
        elif name == "union":
            methods.append(build_union(tokenizer, decoder))
        elif name == "xgrammar":
            built = build_xgrammar(tokenizer, decoder, vocab_size)
            if built is None:
                skipped[name] = "not installed (pip install xgrammar)"
            else:
                methods.append(built)
        else:
            raise SystemExit(f"unknown method {name!r}; methods: {', '.join(METHODS)}")
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.batch_size)]
    chats = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    n_batches = math.ceil(args.samples / args.batch_size)
    generator = torch.Generator().manual_seed(args.seed)
    sample_batch(model, batch, NoMask(), 1.0, 4, eos, generator, Tally())  # warm-up
    tallies = {m.name: Tally() for m in methods}
    # Interleave methods batch by batch so background load affects them alike.
    for temperature in args.temperatures:
        for _ in range(n_batches):
            for method in methods:
                tally = tallies[method.name]
                for tokens, ended in sample_batch(model, batch, method.masker, temperature, args.new_tokens, eos, generator, tally):
                    text = tokenizer.decode(tokens, skip_special_tokens=True)
                    result = decoder.check(text)
                    tally.samples[temperature] = tally.samples.get(temperature, 0) + 1
                    tally.answer_tokens += len(tokens)
                    if not result.valid:
                        tally.invalid[temperature] = tally.invalid.get(temperature, 0) + 1
                        if not ended:
                            tally.cut[temperature] = tally.cut.get(temperature, 0) + 1
                        examples = tally.examples.setdefault(temperature, [])
                        if len(examples) < 3:
                            examples.append(text)
    base = tallies.get("unconstrained")
    base_rate = base.decode_steps / base.decode_s if base and base.decode_s else None
    base_step_ms = 1000 * base.decode_s / base.steps if base and base.steps else None
    report = {
        "model": SMOLLM2,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(), "note": "timings on a shared machine are noisy"},
        "settings": {"batch_size": args.batch_size, "samples_per_temperature": n_batches * args.batch_size, "new_tokens": args.new_tokens, "temperatures": args.temperatures, "seed": args.seed},
        "methods": {},
        "skipped": skipped,
    }
    for method in methods:
        tally = tallies[method.name]
        rate = tally.decode_steps / tally.decode_s if tally.decode_s else 0.0
        report["methods"][method.name] = {
            "build_first_s": round(method.build_first_s, 4),
            "build_cached_s": None if method.build_cached_s is None else round(method.build_cached_s, 4),
            "tokens_per_s": round(rate, 1),
            "vs_unconstrained": round(rate / base_rate, 3) if base_rate else None,
            "mask_ms_per_step": round(1000 * tally.mask_s / max(tally.steps, 1), 3),
            # Under background load tokens/s is noisy; this estimate only adds the mask time to
            # the unconstrained step time: step / (step + mask).
            "est_vs_unconstrained": round(base_step_ms / (base_step_ms + 1000 * tally.mask_s / max(tally.steps, 1)), 3) if base_step_ms else None,
            "mean_answer_tokens": round(tally.answer_tokens / max(sum(tally.samples.values()), 1), 2),
            "invalid_fraction": {str(t): round(tally.invalid.get(t, 0) / tally.samples[t], 4) for t in args.temperatures},
            "cut_by_limit_fraction": {str(t): round(tally.cut.get(t, 0) / tally.samples[t], 4) for t in args.temperatures},
            "invalid_examples": {str(t): tally.examples.get(t, []) for t in args.temperatures},
            "note": method.note,
        }
    return report


def print_table(report: dict) -> None:
    s = report["settings"]
    temps = [str(t) for t in s["temperatures"]]
    print(f"SmolLM2-135M-Instruct, batch {s['batch_size']}, {s['new_tokens']} new tokens, {s['samples_per_temperature']} samples per temperature, "
          f"{report['machine']['cpus']} CPUs ({report['machine']['note']})")
    header = ["method", "build first", "build cached", "tokens/s", "x unconstr.", "mask ms/step", "x unconstr. (est.)"] + [f"invalid T={t}" for t in temps] + [f"cut T={t}" for t in temps]
    rows = []
    for name, m in report["methods"].items():
        rows.append([
            name,
            f"{m['build_first_s']:.3f} s",
            "-" if m["build_cached_s"] is None else f"{m['build_cached_s']:.3f} s",
            f"{m['tokens_per_s']:.1f}",
            "-" if m["vs_unconstrained"] is None else f"{m['vs_unconstrained']:.2f}",
            f"{m['mask_ms_per_step']:.2f}",
            "-" if m["est_vs_unconstrained"] is None else f"{m['est_vs_unconstrained']:.3f}",
            *[f"{100 * m['invalid_fraction'][t]:.1f}%" for t in temps],
            *[f"{100 * m['cut_by_limit_fraction'][t]:.1f}%" for t in temps],
        ])
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    for name, why in report["skipped"].items():
        print(f"skipped {name}: {why}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=256, help="Samples per method and temperature (rounded up to whole batches).")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 1.5])
    parser.add_argument("--methods", default=",".join(METHODS), help=f"Comma-separated subset of {', '.join(METHODS)}.")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="Print one JSON object instead of the table.")
    args = parser.parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print_table(report)


if __name__ == "__main__":
    sys.exit(main())
