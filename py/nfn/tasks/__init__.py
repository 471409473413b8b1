"""Evaluation and fine-tuning tasks: row data as conversations, with slicing and scoring."""
