"""The docs' commands run as written: every `.venv/bin/python -m MODULE ...` and `bash scripts/run_leader.sh |
run_follower.sh ...` line of a page's bash blocks names only flags that the command's own argparse parser (the one its
main() builds for that command line) or the script accepts, and on the pages for parties on their own hosts
(two-hosts, deploy-wan, predict, serving) every party command names its keys, its endpoint and its data."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex

import pytest

from tests.support.paths import REPO

PAGES = ("README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")))
OWN_HOST_PAGES = ("docs/two-hosts.md", "docs/deploy-wan.md", "docs/predict.md", "docs/serving.md")
PYTHON = ".venv/bin/python"
PARTY_SCRIPTS = {"scripts/run_leader.sh": "leader", "scripts/run_follower.sh": "follower"}
ENDPOINT_FLAG = {"leader": "--bind", "follower": "--connect"}


class _Parsed(Exception):
    """Raised instead of parsing: carries the parser a command's main() built for its argv."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def bash_commands(text: str) -> list[list[str]]:
    """The command lines of `text`'s bash blocks as argv lists: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        pending = ""
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            pending += line + "\n"
            try:  # a quoted argument may span lines: read on until its quote closes
                argv = shlex.split(pending, comments=True)
            except ValueError:
                continue
            pending = ""
            if argv:
                commands.append(argv)
    return commands


def party_script_flags() -> set[str]:
    """The flags run_party.sh (behind run_leader.sh and run_follower.sh) takes itself before passing the rest on."""
    text = (REPO / "scripts" / "run_party.sh").read_text()
    loop = text[text.index("while [ $# -gt 0 ]") :]
    return set(re.findall(r"(--[a-z][\w-]*)[|)]", loop[: loop.index("esac")]))


def parser_of(module: str, argv: list[str]) -> argparse.ArgumentParser:
    """The argparse parser that `python -m module` builds for argv (its main(argv), stopped at the parse)."""
    target = module
    if importlib.util.find_spec(module).submodule_search_locations is not None:
        target = module + ".__main__"
    main = importlib.import_module(target).main

    def stop(self, *args, **kwargs):
        raise _Parsed(self)

    saved = {}
    names = ("parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args")
    for name in names:
        saved[name] = getattr(argparse.ArgumentParser, name)
        setattr(argparse.ArgumentParser, name, stop)
    try:
        main(list(argv))
    except _Parsed as parsed:
        return parsed.parser
    finally:
        for name in names:
            setattr(argparse.ArgumentParser, name, saved[name])
    raise AssertionError(f"python -m {module} {' '.join(argv)} parsed no arguments")


def accepted_flags(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The option strings `parser` accepts for argv, a subcommand's included (the first positional that names one)."""
    flags = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = next((a for a in argv if not a.startswith("-") and a in action.choices), None)
            if chosen is not None:
                flags |= set(action.choices[chosen]._option_string_actions)
    return flags


def command_check(argv: list[str]) -> tuple[str | None, list[str], set[str]]:
    """(the party role a command runs or None, its flags, the flags it may use) for one documented command line;
    ([], set()) flags for a command this test does not read (curl, other scripts)."""
    if argv[:2] == [PYTHON, "-m"] and len(argv) > 2:
        module, rest = argv[2], argv[3:]
        role = module if module in ("leader", "follower") else None
        return role, flags_of(rest), accepted_flags(parser_of(module, rest), rest)
    if argv[:1] == ["bash"] and len(argv) > 1 and argv[1] in PARTY_SCRIPTS:
        role, rest = PARTY_SCRIPTS[argv[1]], argv[2:]
        accepted = accepted_flags(parser_of(role, rest), rest) | party_script_flags()
        return role, flags_of(rest) + ([ENDPOINT_FLAG[role]] if len(rest) >= 2 else []), accepted
    return None, [], set()


def flags_of(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("-") and a != "-"]


def unknown_flags(text: str) -> list[str]:
    """'command: flag' for every flag of a documented command that its parser (or script) does not accept."""
    bad = []
    for argv in bash_commands(text):
        _, flags, accepted = command_check(argv)
        bad += [f"{' '.join(argv[:4])}: {f}" for f in flags if f not in accepted and f not in ("--help", "-h")]
    return bad


def own_host_gaps(text: str) -> list[str]:
    """Party commands that lack what a party on its own host must give: --keys, its endpoint, and its data."""
    gaps = []
    for argv in bash_commands(text):
        role, flags, _ = command_check(argv)
        if role is None:
            continue
        needed = ["--keys", ENDPOINT_FLAG[role]]
        missing = [f for f in needed if f not in flags]
        if not {"--data", "--raw", "--run"} & set(flags):
            missing.append("--data")
        if "export" in argv:  # export reads local files only: no peer, no endpoint
            missing = [f for f in missing if f not in ("--keys", ENDPOINT_FLAG[role])]
        if missing:
            gaps.append(f"{' '.join(argv[:5])}: no {', '.join(missing)}")
    return gaps


@pytest.mark.parametrize("page", PAGES)
def test_every_documented_command_names_only_flags_its_parser_accepts(page):
    # Prepare
    text = (REPO / page).read_text()
    # Execute
    bad = unknown_flags(text)
    # Assert
    assert not bad, f"{page}: flags no parser accepts: {bad}"


@pytest.mark.parametrize("page", OWN_HOST_PAGES)
def test_party_commands_for_separate_hosts_name_keys_endpoint_and_data(page):
    # Prepare
    text = (REPO / page).read_text()
    # Execute
    gaps = own_host_gaps(text)
    # Assert
    assert not gaps, f"{page}: {gaps}"
    assert any(command_check(argv)[0] for argv in bash_commands(text)), f"{page}: no party command read"


@pytest.mark.parametrize("page", PAGES)
def test_python_commands_use_the_environments_interpreter(page):
    # Prepare / Execute: a bare `python -m` fails on a fresh clone (the packages are in .venv only)
    bare = [argv for argv in bash_commands((REPO / page).read_text()) if argv[:1] in (["python"], ["python3"])]
    # Assert
    assert not bare, f"{page}: use {PYTHON}: {bare}"


def test_a_misspelt_flag_a_missing_endpoint_and_a_bare_python_are_found():
    """Power: the checks read real parsers and real scripts, so a flag no parser has, one a subcommand lacks, a party
    command without its endpoint and keys, and `python -m` without the environment are each reported."""
    # Prepare
    text = """```bash
.venv/bin/python -m leader --config l.yaml --bind tcp://0.0.0.0:5560 --data d --keys k --check-links
.venv/bin/python -m follower predict --config f.yaml --rows r.csv --run R --keys k --connect tcp://h:1 --http x
.venv/bin/python -m vfl.keys new leader --dir keys --forse
bash scripts/run_follower.sh f.yaml tcp://h:5560 --raw f.csv --shards s --keys k --vocab-min-count 3 --epoch 2
.venv/bin/python -m follower --config f.yaml --data d \\
    --check-link     # and a comment
python -m vfl.keys show keys/leader.key
```
"""
    # Execute
    bad = unknown_flags(text)
    gaps = own_host_gaps(text)
    # Assert
    assert [b.split(": ")[1] for b in bad] == ["--check-links", "--http", "--forse", "--epoch"]
    assert gaps == [".venv/bin/python -m follower --config f.yaml: no --keys, --connect"]
    assert bash_commands(text)[-1][:2] == ["python", "-m"]
