"""scripts/reproduce.py's registry: every figure it re-measures is stated where it says, as it
says (so a docs edit that changes a figure without the registry fails here), and the script
lists its registry. Nothing of the registry is run."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "reproduce.py"


def load():
    spec = importlib.util.spec_from_file_location("reproduce", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["reproduce"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


reproduce = load()
FIGURES = reproduce.FIGURES


def flat(text: str) -> str:
    """Line breaks and runs of spaces as one space: a quote may span a wrapped line."""
    return re.sub(r"\s+", " ", text)


def test_ids_are_unique_and_tiers_valid():
    ids = [figure.id for figure in FIGURES]
    assert len(ids) == len(set(ids)), sorted({figure for figure in ids if ids.count(figure) > 1})
    assert {figure.tier for figure in FIGURES} <= set(reproduce.TIERS)
    assert {need for figure in FIGURES for need in figure.command.needs} <= set(reproduce.NEEDS)
    assert all(re.fullmatch(r"[a-z0-9_.]+", figure.id) for figure in FIGURES)


def test_commands_keys_name_one_command_each():
    commands = {figure.command for figure in FIGURES}
    keys = [command.key for command in commands]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("figure", FIGURES, ids=lambda figure: figure.id)
def test_every_stated_value_appears_where_it_is_cited(figure):
    path = REPO / figure.file
    assert path.is_file(), f"{figure.id}: {figure.file} does not exist"
    assert flat(figure.quote) in flat(path.read_text()), f"{figure.id}: {figure.file} no longer says {figure.quote!r}"
    assert figure.stated in figure.quote, f"{figure.id}: the quote does not hold the stated {figure.stated!r}"


@pytest.mark.parametrize("figure", FIGURES, ids=lambda figure: figure.id)
def test_every_stated_value_is_within_its_own_tolerance(figure):
    low, high = figure.bounds()
    stated_low, stated_high = figure.stated_value()
    assert low <= stated_low <= stated_high <= high


def test_the_quick_tier_holds_the_readme_headline():
    quick = [figure for figure in FIGURES if figure.tier == "quick"]
    assert {figure.file for figure in quick} == {"README.md", "docs/benchmarks.md"}
    assert sum(command.minutes for command in {figure.command for figure in quick}) <= 2


def test_fault_drill_table_is_read_as_the_script_prints_it():
    table = ("| collector | kills | restarts | env errors | batches | frames lost | hangs | orphans | shm leftovers | "
             "status |\n|---|---|---|---|---|---|---|---|---|---|\n"
             "| multisync | 8 | 12 | 4 | 256 | 1536 | 0 | 0 | 0 | finished |\n"
             "| ray | 8 | 9 | 1 | 256 | 1152 | 1 | 0 | 2 | failed: boom |\n")

    class Outcome:
        def text(self):
            return table

    assert reproduce.fault_drill_problems("multisync").fn(Outcome()) == 0
    assert reproduce.fault_drill_problems("ray").fn(Outcome()) == 4


def test_list_runs_and_names_every_figure():
    result = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for figure in FIGURES:
        assert figure.id in result.stdout
    result = subprocess.run([sys.executable, str(SCRIPT), "--list", "--only", "no.such.figure"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0 and "no figure no.such.figure" in result.stderr
