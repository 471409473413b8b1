"""Published weights into nfn checkpoints: `nfn import` (docs/weights.md).

decoder_checkpoint writes a llama checkpoint as the llama trainer writes one; gguf_import
reads a llama GGUF file (llama.cpp's format) and gguf_tokenizer builds its tokenizer.
"""
