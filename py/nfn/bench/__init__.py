"""Benchmarks of nfn's own engines, run by `nfn bench` (infer: the KV-cached generation engine)."""
