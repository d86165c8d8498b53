"""emojikit: teach language models to communicate in emoji.

Everything a plugin needs is importable from here (docs/plugins.md is the contract):

    from emojikit import Component, hookimpl, ConfigModel, Message, JudgeView, Episode

The core is grouped by domain (docs/design.md): api/ (the plugin contract), composition/
(registry, assembly, recipes), play/ (the game), training/ (data, SFT, GRPO), evaluation/,
stages/ (run directories, chains), support/ (bundled models and their loading, I/O, retry), ui/ (CLI, web).
The flat module paths of earlier releases (`emojikit.components`, `emojikit.game`, ...) still
import: emojikit/_moved.py maps them to their new homes.
"""

from emojikit import _moved

_moved.install()

from emojikit.api import emojis
from emojikit.composition.assembly import build_component
from emojikit.api.components import (
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
    RepairTeacher,
    Reward,
    SuccessThreshold,
    TargetBelief,
    Teacher,
    StoredStep,
    TrackedRun,
    Tracker,
)
from emojikit.api.config import ConfigModel, ExistingPath
from emojikit.api.errors import (
    ConfigError,
    EmojikitError,
    InputFileError,
    MissingCredentialError,
    ModelUnavailableError,
    PluginError,
    RemoteServiceError,
)
from emojikit.api.format import DEFAULT_FORMAT, EmojiFormat, format_of
from emojikit.api.hookspecs import hookimpl
from emojikit.api.policy import AdamParams, ChatMessages, Datum, LossOutput, Policy, Sample, SampleTotals, SamplingParams, TokenConstraint
from emojikit.api.secrets import require_key
from emojikit.support.models import load_model_and_tokenizer
from emojikit.play.guesses import clean_guess

__version__ = "0.1.0"
__all__ = [
    # declaring components
    "Component", "hookimpl", "ConfigModel", "ExistingPath", "BuildContext", "build_component", "require_key",
    # the kinds' contracts and their data
    "PromptSource", "Teacher", "Judge", "Reward", "Decoder", "Policy", "TokenConstraint", "Tracker", "TrackedRun",
    "Message", "JudgeView", "Episode", "EpisodeTurn", "FormatCheck",
    "Sample", "SamplingParams", "Datum", "LossOutput", "AdamParams", "ChatMessages",
    # optional capabilities
    "CandidatePool", "TargetBelief", "RepairTeacher", "SuccessThreshold", "BindingReport", "SampleTotals", "StoredStep", "DEFAULT_SUCCESS_THRESHOLD",
    # a language model, loaded offline-first (the bundled ones by `bundled:` name)
    "load_model_and_tokenizer",
    # a chat model's answer as a judge's guess (the bundled chat-model judges' one cleaner)
    "clean_guess",
    # the emoji format
    "EmojiFormat", "DEFAULT_FORMAT", "format_of", "emojis",
    # errors a plugin raises
    "EmojikitError", "ConfigError", "InputFileError", "PluginError", "MissingCredentialError",
    "ModelUnavailableError", "RemoteServiceError",
    "__version__",
]
