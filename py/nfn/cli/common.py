"""Small helpers shared by the command parsers (standard library only)."""
import argparse


class Parser(argparse.ArgumentParser):
    """nfn's parsers, subcommands' too (add_subparsers makes them of the parent's class): no
    prefix matching of long flags, so a flag added later never changes what a script's
    abbreviation meant, nor makes it ambiguous."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def add_command(sub, name, module_doc, **kwargs):
    """A subcommand whose help is its module docstring: first line short, the rest as description."""
    summary, _, body = module_doc.strip().partition("\n")
    return sub.add_parser(
        name,
        help=summary.rstrip("."),
        description=(summary + "\n" + body).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
