"""From a recipe to built components: the plugin registry, the one assembly seam, TOML recipes
and preflight checks."""
