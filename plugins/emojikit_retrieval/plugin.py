"""Hook implementations: the `retrieval`, `keywords` and `local-lm` judges, the `similarity` reward and
the learning probe's `keyword-share` reward.

Only configs and pure-Python helpers are imported here; MiniLM and transformers load inside
the factories.
"""

from emojikit.api.components import Component
from emojikit.api.hookspecs import hookimpl

from emojikit_retrieval import keywords, local_lm, probe, retrieval, reward


@hookimpl
def register_judges():
    return [
        Component(
            name="retrieval",
            summary="Offline: CLDR names of the emoji -> nearest message in a candidate pool (MiniLM); never repeats a guess",
            config=retrieval.RetrievalConfig,
            factory=retrieval.build,
            preflight=retrieval.preflight,
        ),
        Component(
            name="keywords",
            summary="Offline: emojilib's human-curated keywords of the emoji -> nearest message in a candidate pool (MiniLM); a reader GRPO does not train against",
            config=keywords.KeywordsConfig,
            factory=keywords.build,
            preflight=retrieval.preflight,
        ),
        Component(
            name="local-lm",
            summary="A local transformers chat model (default: bundled SmolLM2) reconstructs the message",
            config=local_lm.LocalLMConfig,
            factory=local_lm.build,
        ),
    ]


@hookimpl
def register_rewards():
    return [
        Component(
            name="similarity",
            summary="MiniLM similarity of guess and target, success bonus, turn/format/repetition penalties",
            config=reward.SimilarityConfig,
            factory=reward.build,
        ),
        Component(
            name="keyword-share",
            summary="The learning probe's reward: share of sent emoji whose emojilib keywords include a word (default: animal)",
            config=probe.KeywordShareConfig,
            factory=probe.build,
        ),
    ]
