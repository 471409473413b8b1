"""Inference, evaluation and checkpoint interchange for dense GPT checkpoints.

    checkpoint   find a checkpoint, read its header and layout (standard library only)
    safetensors  our own reader and writer of the safetensors format
    hf           export to and import from the Hugging Face GPT-2 layout
    model        load weights, geometry and tokenizer, and start the native engine
    generate     `nfn infer`: prefill, then KV-cached decoding, streamed
    evaluate     `nfn eval`: loss, perplexity and bits per byte on a dataset split

This package file imports nothing, so the header-only paths stay light.
"""
