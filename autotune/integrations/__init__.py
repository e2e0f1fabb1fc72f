"""Framework integrations of the trial API: `hf` (transformers.Trainer), `lightning`."""
