"""The job-script templates' compiled code kept beside them (hpc/launcher/template_cache.py)."""

import os
import sys
from pathlib import Path

import jinja2
import jinja2.bccache
import pytest

from hpc.launcher import render, template_cache


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    folder = tmp_path / "sbatch"
    folder.mkdir()
    (folder / "base.sbatch.j2").write_text("#!/bin/bash\n{% block body %}echo base{% endblock %}\n")
    (folder / "job.sbatch.j2").write_text("{% extends 'base.sbatch.j2' %}{% block body %}echo {{ name | q }}{% endblock %}")
    return folder


def cached(folder: Path) -> list[str]:
    return sorted(path.name for path in (folder / template_cache.CACHE_FOLDER).glob("*.j2c"))


def refuse_compiling(monkeypatch) -> None:
    def compile_(*args, **kwargs):
        raise AssertionError("a template was compiled again")

    monkeypatch.setattr(jinja2.Environment, "compile", compile_)


def test_a_second_render_loads_the_compiled_templates_instead_of_compiling_them(templates, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    first = render.render("job.sbatch.j2", {"name": "a b"}, templates)
    assert len(cached(templates)) == 2  # the template and the one it extends
    refuse_compiling(monkeypatch)
    assert render.render("job.sbatch.j2", {"name": "a b"}, templates) == first == "#!/bin/bash\necho 'a b'"


def test_an_edited_template_is_compiled_again(templates, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    render.render("job.sbatch.j2", {"name": "x"}, templates)
    (templates / "base.sbatch.j2").write_text("#!/bin/sh\n{% block body %}{% endblock %}\n")
    assert render.render("job.sbatch.j2", {"name": "x"}, templates) == "#!/bin/sh\necho x"


def test_a_folder_others_may_write_to_is_not_used(templates, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    folder = templates / template_cache.CACHE_FOLDER
    folder.mkdir()
    os.chmod(folder, 0o777)
    assert render.make_environment(templates).bytecode_cache is None
    assert render.render("job.sbatch.j2", {"name": "x"}, templates) == "#!/bin/bash\necho x"
    assert cached(templates) == []


def test_a_link_in_place_of_the_folder_is_not_used(templates, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (templates / template_cache.CACHE_FOLDER).symlink_to(elsewhere)
    render.render("job.sbatch.j2", {"name": "x"}, templates)
    assert list(elsewhere.iterdir()) == []


def test_with_pythondontwritebytecode_nothing_is_written(templates, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert render.render("job.sbatch.j2", {"name": "x"}, templates) == "#!/bin/bash\necho x"
    assert not (templates / template_cache.CACHE_FOLDER).exists()


def test_a_cache_that_cannot_be_written_leaves_the_render_as_it_was(templates, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jinja2.bccache.tempfile, "NamedTemporaryFile", full_disk)
    assert render.render("job.sbatch.j2", {"name": "x"}, templates) == "#!/bin/bash\necho x"
    assert cached(templates) == []


def test_the_key_changes_with_the_compile_settings_and_how_a_filter_is_called():
    plain = jinja2.Environment()
    trimmed = jinja2.Environment(trim_blocks=True)
    assert template_cache.settings_key(plain) != template_cache.settings_key(trimmed)
    plain.filters["q"] = lambda value: value
    before = template_cache.settings_key(plain)
    plain.filters["q"] = jinja2.pass_context(lambda context, value: value)
    assert template_cache.settings_key(plain) != before
