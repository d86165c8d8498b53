"""The error tree. The CLI prints an EmojikitError as one line and exits with status 2;
any other exception is a bug and keeps its traceback."""


class EmojikitError(Exception):
    """Base of every error a user can fix."""


class ConfigError(EmojikitError, ValueError):
    """A recipe, a component config or a CLI argument is invalid."""


class InputFileError(EmojikitError, ValueError):
    """A referenced input file is missing or malformed (the message names file:line)."""


class PluginError(EmojikitError, RuntimeError):
    """Plugins conflict (duplicate names) or a requested component is not installed."""


class MissingCredentialError(EmojikitError, RuntimeError):
    """An API key a component needs is not set."""


class RunDirectoryError(EmojikitError, RuntimeError):
    """The run directory is in use or cannot be resumed."""


class ModelUnavailableError(EmojikitError, RuntimeError):
    """A model is not available offline."""


class RemoteServiceError(EmojikitError, RuntimeError):
    """A remote service kept failing after retries."""


class OutputError(EmojikitError, RuntimeError):
    """A file or directory could not be written: full disk, read-only location, a file in the way."""
