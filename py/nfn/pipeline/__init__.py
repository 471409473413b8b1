"""`nfn pipeline`: the chat pipeline end to end (plan.py: stages and sizes; run.py: running them; summary.py)."""
