"""Models: loading Hugging Face checkpoints, the value head, the built-in tiny model, decoder stages."""
