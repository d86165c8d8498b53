"""A trained sender leaves the toolkit: `emojikit export` (a merged model or a PEFT adapter
with a model card, optionally pushed to the Hub) and the checkpoint lookup the `llm` plugin
shares. Backends do the weight work through the WeightsExport capability."""
