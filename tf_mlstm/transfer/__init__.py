"""Transfer of the language model to classification: features, probes, fine-tuning, views."""
