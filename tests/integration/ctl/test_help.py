"""Every mqctl command's --help: Typer's own type column, a help text for every option, no leaked markup."""

from __future__ import annotations

import typer

from ctl.app import app
from tests.integration.ctl.cli import mqctl


def commands(group, path=()):
    """(path, click command) of every leaf command, through the sub-groups (dev, cluster)."""
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


ALL = list(commands(typer.main.get_command(app)))


def test_the_walk_finds_every_command_group():
    names = {" ".join(path) for path, _ in ALL}
    assert {"clusterList", "consumeMessage", "dev up", "cluster wait", "haStatus", "kill"} <= names


def test_every_option_has_a_help_text_and_keeps_typers_type_display():
    missing, metavars = [], []
    for path, command in ALL:
        for param in command.params:
            if param.param_type_name != "option":
                continue
            if not param.help:
                missing.append(f"{' '.join(path)} {param.opts[-1]}")
            if param.metavar is not None:  # a metavar replaces Typer's <type> column
                metavars.append(f"{' '.join(path)} {param.opts[-1]}={param.metavar}")
    assert missing == []
    assert metavars == []


def test_every_help_page_renders_without_markup_leaking():
    for path, _ in ALL:
        result = mqctl(*path, "--help")
        assert result.exit_code == 0, (path, result.stderr)
        text = result.stdout
        assert "Usage: mqctl " + " ".join(path) in text
        for stray in ("`", "[/", "[bold", "\\[", "None]"):
            assert stray not in text, (path, stray)
