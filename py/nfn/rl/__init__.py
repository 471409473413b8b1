"""`nfn rl`: reinforcement learning of a chat model on questions with checkable answers
(GSM8K, or a synthetic arithmetic task), as nanochat's chat_rl.py, on the native engine."""
