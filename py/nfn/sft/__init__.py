"""Supervised fine-tuning: a task mixture rendered into masked-row shards for the native trainer."""
