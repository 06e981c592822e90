#!/usr/bin/env python3
"""Write docs/cli.md from admit's own argument parsers (``admit.cli.build_parser``), so the CLI reference cannot
drift from the code: tests/release/test_release.py fails when docs/cli.md differs from what this prints.

    python hack/cli_docs.py > docs/cli.md
    python hack/cli_docs.py -o docs/cli.md

A mistake (an unknown argument, an output path that cannot be written) is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admit.cli import build_parser  # noqa: E402

INTRO = """\
Generated from admit's argument parsers (`admit/cli/__init__.py`) by `python hack/cli_docs.py > docs/cli.md`; a test fails
when this page and the code differ. `admit <command> --help` prints the same. The chart passes its values to
`admit serve` as these flags (`charts/admit/templates/deployment.yaml`); what admit writes onto objects is in
[behaviour.md](behaviour.md#what-admit-writes).
"""


def _flags(action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.choices and action.option_strings:
        names += " " + "\\|".join(str(c) for c in action.choices)
    elif action.nargs != 0 and action.option_strings:
        names += f" {action.metavar or action.dest.upper()}"
    return names


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        default = action.default
        if isinstance(default, list) and not default:
            default = "none"
        text = text % {"default": default, "prog": "admit", "choices": action.choices}
    return text.replace("|", "\\|").replace("<", "&lt;")


def render() -> str:
    """docs/cli.md: what admit is (the top-level parser's description, as ``admit --help`` prints it), how the page
    is made, the subcommands, then per subcommand its description and a table of its arguments."""
    parser = build_parser()
    out = [f"# CLI reference\n\n{parser.description}.\n", INTRO]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out.append("| command | what |\n|---|---|")
    for choice in sub._choices_actions:
        out.append(f"| [`admit {choice.dest}`](#admit-{choice.dest}) | {choice.help} |")
    out.append("")
    out.append("`admit --version` prints the version.\n")
    for name, command in sub.choices.items():
        out.append(f"## admit {name}\n")
        out.append((command.description or "") + "\n")
        out.append("| argument | meaning |\n|---|---|")
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            out.append(f"| {_flags(action)} | {_help(action)} |")
        out.append("")
    return "\n".join(out)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line, not argparse's usage block."""
        self.exit(2, f"{self.prog}: {message} (--help shows the usage)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="hack/cli_docs.py", description="Write docs/cli.md from admit's argument parsers.")
    parser.add_argument("-o", "--output", help="write here instead of standard output")
    args = parser.parse_args(argv)
    text = render()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text)
    except OSError as e:
        print(f"hack/cli_docs.py: {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
