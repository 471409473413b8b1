"""Tokenizers by name: gpt2 and trained chat BPEs (placeholder until the datasets work lands)."""
