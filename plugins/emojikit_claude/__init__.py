"""Claude components: a prompt source, a teacher and a judge on the Anthropic API."""
