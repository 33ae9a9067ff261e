"""Every ```python block of the pages that teach the Python package (docs/python.md, the README) runs, each in a fresh
namespace and an empty working directory: the documentation's Python is code that works. (docs/file_format.md's h5py
blocks read a particular checkpoint; tests/io checks the layout they describe.)"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "python.md", ROOT / "README.md"]
BLOCKS = [(page.relative_to(ROOT).as_posix(), k, code)
          for page in PAGES
          for k, code in enumerate(re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M))]


def test_the_docs_have_python_blocks():
    assert any(page == "docs/python.md" for page, _, _ in BLOCKS)


@pytest.mark.parametrize("page,k,code", BLOCKS, ids=[f"{p}#{k}" for p, k, _ in BLOCKS])
def test_block_runs(page, k, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{page} block {k}", "exec"), {"__name__": f"docs_block_{k}"})
