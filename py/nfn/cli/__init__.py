"""The `nfn` command line. Parsers here import only the standard library; each command's
implementation is imported when that command runs, so `--help` stays instant."""
