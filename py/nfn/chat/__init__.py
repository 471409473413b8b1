"""Chat data: conversations rendered to token ids and loss masks, and best-fit row packing."""
