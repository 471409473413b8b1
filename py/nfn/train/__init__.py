"""Driving the native trainers from Python: dataset resolution, the argv, the run."""
