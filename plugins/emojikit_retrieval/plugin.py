"""Hook implementations: the `retrieval`, `keywords`, `panel`, `lm-reader` and `local-lm` judges, the `similarity` reward and
the learning probe's `keyword-share` reward.

Only configs and pure-Python helpers are imported here; MiniLM and transformers load inside
the factories.
"""

from emojikit.api.components import Component
from emojikit.api.hookspecs import hookimpl

from emojikit_retrieval import keywords, lm_reader, local_lm, panel, probe, retrieval, reward


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
            summary="Offline: emojilib's human-curated keywords of the emoji -> nearest message in a candidate pool (MiniLM); not the teacher's reading",
            config=keywords.KeywordsConfig,
            factory=keywords.build,
            preflight=retrieval.preflight,
        ),
        Component(
            name="panel",
            summary="Offline: several pool readers (default keywords + retrieval) read the emoji; their scores combine by mean or min",
            config=panel.PanelConfig,
            factory=panel.build,
            preflight=panel.preflight,
        ),
        Component(
            name="lm-reader",
            summary="Offline: a local LM (default: Gemma 3 270M, the third-reader extra) names each raw emoji -> nearest message in a candidate pool",
            config=lm_reader.LMReaderConfig,
            factory=lm_reader.build,
            preflight=lm_reader.preflight,
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
