"""The command line, the interactive commands (play, chat, inspect) and the web game."""
