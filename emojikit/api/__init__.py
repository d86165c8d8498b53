"""The plugin contract: hook specs, the component kinds and their data, the Policy primitives,
the emoji format, config models, errors, the emoji inventory and API keys. Imports nothing above it."""
