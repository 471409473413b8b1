"""nfn: train, sample and evaluate GPT-family models with compiled native trainers.

This package is imported by every `nfn` command, so it imports nothing itself.
"""
__version__ = "0.1.0"
