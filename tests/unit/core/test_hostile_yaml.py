"""Hostile YAML (issue 11, class 1): every command that reads a recipe answers exit 0 or 2
with one line on stderr, never a traceback, never a hang. Classes 2 and 9 add values that
would be changed (control characters), names the environment depends on (env.PATH),
and what validate accepted but render refused (long values, odd names, bad pins): the
corpus files must be refused alike by validate, show and render.

Two parts: the ``tests/hostile/`` corpus (plus FIFOs, devices, directories, a sparse
huge file and a symlink loop made at test time), and a hypothesis fuzz target over the
reader and ``--set`` with the corpus' classes as explicit examples. A SIGALRM guard
turns a hang (a blocking open of a FIFO) into a failure instead of a stuck run.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from envforge.cli import main
from envforge.core import yamlcheck
from envforge.errors import DataFileError
from tests.helpers import paths

pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

CORPUS = paths.TESTS / "hostile"
GOOD = paths.TESTS / "fixtures" / "recipes" / "golden-cpu.yaml"
HANG_LIMIT_S = 60

#: What the one line must say for each corpus file (a fragment).
EXPECT = {
    "complex-key-block.yaml": "complex '?' key",
    "complex-key-flow.yaml": "complex '?' key",
    "complex-key-map.yaml": "complex '?' key",
    "deep-flow-list.yaml": "nested more than",
    "deep-flow-map.yaml": "nested more than",
    "deep-block.yaml": "nested more than",
    "big-int.yaml": "a number of 5000 characters",
    "big-float.yaml": "a number of 5002 characters",
    "surrogate-description.yaml": "description (line 3): contains a lone surrogate",
    "surrogate-key.yaml": "contains a lone surrogate",
    "alias-bomb.yaml": "aliases expanded",
    "recursive-alias.yaml": "nested more than",
    "merge-key.yaml": "merge keys",
    "set-tag.yaml": "unsupported YAML tag",
    "python-tag.yaml": "unsupported YAML tag",
    "unknown-tag.yaml": "not valid YAML",
    "binary-value.yaml": "description: expected a string, got bytes",
    "duplicate-key.yaml": "appears twice",
    "top-level-list.yaml": "expected a mapping",
    "top-level-scalar.yaml": "expected a mapping",
    "empty.yaml": "expected a mapping",
    "multi-document.yaml": "not valid YAML",
    "bad-timestamp.yaml": "not valid YAML",
    "tab-indent.yaml": "not valid YAML",
    "not-utf8.yaml": "not UTF-8",
    "nul-byte.yaml": "not valid YAML",
    # class 2: values that would be changed, names the environment depends on
    "control-esc-description.yaml": "description: contains the control character '\\x1b'",
    "control-bel-env-value.yaml": "env.X.value: contains the control character '\\x07'",
    "control-del-env-value.yaml": "env.X.value: contains the control character '\\x7f'",
    "control-c1-products.yaml": "gpu.products[0]: contains the control character '\\x9b'",
    "control-esc-package.yaml": "packages[0]: contains the control character '\\x1b'",
    "control-esc-why.yaml": "env.X.why: contains the control character",
    "reserved-env-path.yaml": "env.PATH: is reserved",
    "reserved-env-ld-library-path.yaml": "env.LD_LIBRARY_PATH: is reserved",
    "reserved-env-pythonpath.yaml": "env.PYTHONPATH: is reserved",
    "reserved-env-bash-env.yaml": "env.BASH_ENV: is reserved",
    "reserved-env-env.yaml": "env.ENV: is reserved",
    "step-timeout-inf.yaml": "certify.step_timeout: inf is not a finite number",
    "step-timeout-nan.yaml": "certify.step_timeout: nan is not a finite number",
    "step-timeout-huge.yaml": "certify.step_timeout: 1e+308 s is more than a day",
    "step-timeout-zero.yaml": "certify.step_timeout: must be greater than zero",
    "step-timeout-negative.yaml": "certify.step_timeout: must be greater than zero",
    # class 9: what validate accepted and render refused, and malformed values
    "long-env-value.yaml": "env.X.value: is 5000 characters long",
    "env-name-newline.yaml": "env.'X\\n': contains '\\n'",
    "env-name-esc.yaml": "env.'X\\x1b[2J': contains the control character",
    "products-too-long.yaml": "gpu.products: together 6004 characters",
    "python-arabic-digits.yaml": "python: '3.\u0661\u0661' is not a version",
    "torch-version-arabic-digits.yaml": "torch.version: '2.\u0661\u0663.0' is not a version",
    "torch-version-epoch.yaml": "torch.version: '1!2.13.0' has an epoch",
    "name-dot-dot.yaml": "name: '0..' is not a valid recipe name",
    "malformed-pin.yaml": "packages[0]: 'foo===' has an empty pin",
    "wildcard-pin.yaml": "packages[0]: 'foo==1.*' pins a prefix",
}


def _hang(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError(f"no answer within {HANG_LIMIT_S} s (a hang)")


@pytest.fixture(autouse=True)
def _no_hang(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(HANG_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI in-process; check the contract; return (exit code, stderr line)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in out + err
    if code == 2:
        return code, _one_error_line(err)
    return code, ""


def _one_error_line(err: str) -> str:
    """The one error line (``validate`` first reports each file it refused as FAIL)."""
    lines = err.splitlines()
    assert lines, "no error line"
    assert lines[-1].startswith("envforge: error: "), lines
    assert all(line.startswith("FAIL  ") for line in lines[:-1]), lines
    return lines[-1]


def test_corpus_is_complete() -> None:
    assert sorted(EXPECT) == sorted(p.name for p in CORPUS.iterdir())


@pytest.mark.parametrize("name", sorted(EXPECT))
@pytest.mark.parametrize("command", ["validate", "show", "render"])
def test_corpus_file_is_refused_in_one_line(
    name: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = CORPUS / name
    code, line = run(capsys, command, str(path))
    assert code == 2
    assert str(path) in line
    assert EXPECT[name] in line


def _specials(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    sparse = tmp_path / "huge.yaml"
    with sparse.open("wb") as fh:
        fh.truncate(8 << 30)  # 8 GiB, no blocks used
    return {
        "not a regular file": fifo,
        "is a directory": folder,
        "cannot be read": loop,
        "bytes, more than": sparse,
    }


@pytest.mark.parametrize("command", ["validate", "show", "render"])
def test_special_files_are_refused_without_blocking(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {**_specials(tmp_path), "not a regular file ": Path("/dev/zero")}
    for expect, path in cases.items():
        code, line = run(capsys, command, str(path))
        assert code == 2
        assert f"{path}: " in line
        assert expect.strip() in line


def test_special_files_in_recipe_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _specials(tmp_path)
    monkeypatch.setenv("ENVFORGE_RECIPE_PATH", str(tmp_path))
    code, line = run(capsys, "show", "fifo")
    assert code == 2
    assert "fifo.yaml: it is a FIFO, not a regular file" in line
    code, _ = run(capsys, "list")  # does not hang on the FIFO
    assert code == 0  # the FIFO is listed as broken; the other recipes are listed


@pytest.mark.parametrize(
    ("item", "expect"),
    [
        ("gpu.products=? [a]: 1", "complex '?' key"),
        ("gpu={[a]: 1}", "complex '?' key"),
        ("packages=" + "[" * 3000 + "]" * 3000, "nested more than"),
        ("certify.step_timeout=" + "9" * 5000, "a number of 5000 characters"),
        ('description="a\\ud800"', "lone surrogate"),
        ("description=a\udcff", "lone surrogate"),
        ("packages=!!set {a}", "unsupported YAML tag"),
        ("certify.step_timeout=.inf", "not a finite number"),
        ("certify.step_timeout=.nan", "not a finite number"),
        ("certify.step_timeout=1.0e+308", "more than a day"),
        ("certify.step_timeout=86401", "more than a day"),
        ("certify.step_timeout=0", "greater than zero"),
        ("certify.step_timeout=-1", "greater than zero"),
        ('description="a\\eb"', "description: contains the control character '\\x1b'"),
        ("description=a\x1b[31mred", "description: contains the control character '\\x1b'"),
        ('gpu.products=["a\\x9bb"]', "gpu.products[0]: contains the control character"),
        ('packages=["foo==1\\a"]', "packages[0]: contains the control character"),
        ("env.X=a\x1bb", "env.X.value: contains the control character"),
        ("env.X=a\x7f", "env.X.value: contains the control character"),
        ("env.PATH=/x", "env.PATH: is reserved"),
        ("env.LD_LIBRARY_PATH=/opt/rocm/lib", "env.LD_LIBRARY_PATH: is reserved"),
        ("env.LD_PRELOAD=/x.so", "env.LD_PRELOAD: is reserved"),
        ("env.PYTHONHOME=/x", "env.PYTHONHOME: is reserved"),
        ("env.HOME=/x", "env.HOME: is reserved"),
        ("env.X=" + "a" * 5000, "env.X.value: is 5000 characters long"),
        ("env.X\n=1", "env.'X\\n': contains"),
        ('python="3.\u0661\u0661"', "is not a version"),
        ("name=0..", "name: '0..' is not a valid recipe name"),
        ("name=a-", "name: 'a-' is not a valid recipe name"),
        ("packages=[foo===]", "'foo===' has an empty pin"),
        ("packages=[foo==]", "'foo==' has an empty pin"),
        ('packages=["foo==1.0,<0.5"]', "can never be satisfied"),
        ("torch.version=v2.13.00", "is not written the standard way"),
        ("torch.version=1!2.13.0", "has an epoch"),
        ("torch.version=2.13.0+" + "a" * 60, "torch.version: is 67 characters long"),
        ("rocm=5." + "2" * 40, "rocm: is 42 characters long"),
        ("rocm=\u0665.\u0662", "rocm: '\u0665.\u0662' is not a version"),
        ("cuda=12.\u0666", "is not a version"),
        ("certify.step_timeout=\u0661\u0660", "expected a number of seconds"),
    ],
)
def test_hostile_set_values(item: str, expect: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = run(capsys, "validate", str(GOOD), "--set", item)
    assert code == 2
    assert "--set" in line or str(GOOD) in line
    assert expect in line


# --------------------------------------------------------------------------- fuzz

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=20,
)
_YAMLISH = st.text(
    alphabet=st.sampled_from(list("?:-[]{}&*!|>'\"#%@`,\\ \n\tab1.0xu")), max_size=60
)


def _dump(tree: object) -> str:
    return yaml.safe_dump(tree, allow_unicode=True)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(text=st.one_of(_YAMLISH, _TREES.map(_dump), st.text(max_size=80)))
@example(text="? [a]\n: 1\n")
@example(text="a: " + "[" * 5000 + "]" * 5000)
@example(text="a: " + "9" * 5000)
@example(text='description: "\\ud800"')
@example(text="a: &r [*r]")
def test_fuzz_reader(text: str) -> None:
    line = "fuzz.yaml: parsed"
    try:
        yamlcheck.parse(text, "fuzz.yaml")
    except DataFileError as exc:
        line = exc.one_line()
    assert "\n" not in line
    assert line.startswith("fuzz.yaml")


@FUZZ
@given(
    key=st.sampled_from(
        [
            "description",
            "python",
            "packages",
            "gpu",
            "gpu.products",
            "env.X",
            "certify",
            "certify.step_timeout",
            "torch.version",
            "name",
            "a.b.c",
        ]
    ),
    value=st.one_of(_YAMLISH, _TREES.map(lambda t: _dump(t).strip()), st.text(max_size=40)),
)
@example(key="gpu.products", value="? [a]: 1")
@example(key="packages", value="[" * 3000 + "]" * 3000)
@example(key="certify.step_timeout", value="9" * 5000)
@example(key="description", value='"\\ud800"')
@example(key="description", value="\udcff")
@example(key="description", value='"a\\eb"')
@example(key="description", value="a\x1b[2Jb")
@example(key="env.X", value="\x9b")
@example(key="env.X", value="a" * 5000)
@example(key="env.PATH", value="/x")
@example(key="env.LD_LIBRARY_PATH", value="/opt/rocm/lib")
@example(key="name", value="0..")
@example(key="python", value="3.\u0661\u0661")
@example(key="packages", value="[foo===]")
@example(key="certify.step_timeout", value="1.0e+308")
@example(key="certify.step_timeout", value=".nan")
@example(key="certify.step_timeout", value="-1")
@example(key="torch.version", value="1!2.13.0")
def test_fuzz_set(key: str, value: str) -> None:

    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["validate", str(GOOD), "--set", f"{key}={value}"])
    assert code in (0, 2)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    if code == 2:
        _one_error_line(err.getvalue())


@FUZZ
@given(text=st.one_of(_YAMLISH, _TREES.map(_dump)))
@example(text="? [a]\n: 1\n")
@example(text='name: x\ndescription: "\\udc80"\n')
@example(text=(CORPUS / "control-esc-description.yaml").read_text(encoding="utf-8"))
@example(text=(CORPUS / "reserved-env-path.yaml").read_text(encoding="utf-8"))
@example(text=(CORPUS / "env-name-newline.yaml").read_text(encoding="utf-8"))
@example(text=(CORPUS / "long-env-value.yaml").read_text(encoding="utf-8"))
@example(text=(CORPUS / "step-timeout-huge.yaml").read_text(encoding="utf-8"))
@example(text=(CORPUS / "malformed-pin.yaml").read_text(encoding="utf-8"))
def test_fuzz_files_through_show(text: str) -> None:

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        err = io.StringIO()
        out = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(["show", str(path)])
    assert code in (0, 2)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    if code == 2:
        _one_error_line(err.getvalue())
