"""emojikit: teach language models to communicate in emoji.

Everything a plugin needs is importable from here (docs/plugins.md is the contract):

    from emojikit import Component, hookimpl, ConfigModel, Message, JudgeView, Episode
"""

from emojikit import emojis
from emojikit.assembly import build_component
from emojikit.components import (
    DEFAULT_SUCCESS_THRESHOLD,
    BindingReport,
    BuildContext,
    CandidatePool,
    Component,
    Decoder,
    Episode,
    EpisodeTurn,
    FormatCheck,
    Judge,
    JudgeView,
    Message,
    PromptSource,
    Reward,
    SuccessThreshold,
    TargetBelief,
    Teacher,
)
from emojikit.config import ConfigModel, ExistingPath
from emojikit.errors import (
    ConfigError,
    EmojikitError,
    InputFileError,
    MissingCredentialError,
    ModelUnavailableError,
    PluginError,
    RemoteServiceError,
)
from emojikit.format import DEFAULT_FORMAT, EmojiFormat, format_of
from emojikit.hookspecs import hookimpl
from emojikit.policy import AdamParams, ChatMessages, Datum, LossOutput, Policy, Sample, SampleTotals, SamplingParams, TokenConstraint
from emojikit.secrets import require_key

__version__ = "0.1.0"
__all__ = [
    # declaring components
    "Component", "hookimpl", "ConfigModel", "ExistingPath", "BuildContext", "build_component", "require_key",
    # the kinds' contracts and their data
    "PromptSource", "Teacher", "Judge", "Reward", "Decoder", "Policy", "TokenConstraint",
    "Message", "JudgeView", "Episode", "EpisodeTurn", "FormatCheck",
    "Sample", "SamplingParams", "Datum", "LossOutput", "AdamParams", "ChatMessages",
    # optional capabilities
    "CandidatePool", "TargetBelief", "SuccessThreshold", "BindingReport", "SampleTotals", "DEFAULT_SUCCESS_THRESHOLD",
    # the emoji format
    "EmojiFormat", "DEFAULT_FORMAT", "format_of", "emojis",
    # errors a plugin raises
    "EmojikitError", "ConfigError", "InputFileError", "PluginError", "MissingCredentialError",
    "ModelUnavailableError", "RemoteServiceError",
    "__version__",
]
