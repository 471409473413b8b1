"""Datasets: raw text and existing shards resolved to cached llm.c-format token shards.

Importing this package imports nothing heavy; numpy and the tokenizers load only when a
dataset is actually tokenized (nfn.data.prepare).
"""
DEFAULT_DATASET = "shakespeare"
