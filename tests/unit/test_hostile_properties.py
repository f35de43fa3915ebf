"""Property: every reader and renderer, fed a mutated real file, either renders it correctly or
exits 2 with one sentence naming the file (issue 22's validation layer).

The seeds are real: the 2xH200 `check --format json` report, an `ansible -t` tree and
ansible-runner job events (tests/fixtures/ansible-2026-12-01). hypothesis picks one value
anywhere in the document and replaces it (wrong type, escape sequences, a 400-digit integer,
NaN, deep nesting, a missing key) or cuts the file short, then runs the real command.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LIVE = json.loads((FIXTURES / "report" / "live-h200x2-2026-11-30.json").read_text())
ANSIBLE = FIXTURES / "ansible-2026-12-01"
FORMATS = ("table", "json", "junit", "prometheus", "markdown", "html", "html-static")
ESCAPES = (b"\x1b", b"\x07", "\x9b".encode(), "\u202e".encode())
DELETE = object()

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.just(10**400), st.just(-(2**64)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["inf", "nan", "\x1b]52;c;ZXZpbA==\x07", "\x1b[2J", "\u202eevil", "\x9b31m",
                     "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz", "", "GF999", "ok"]),
    st.text(max_size=20),
    st.just([]), st.just({}), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just("@DEEP@"), st.just(DELETE),
)


def _mutate(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return {} if value is DELETE else value
    doc = json.loads(json.dumps(doc))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _text(doc: Any, cut: int | None) -> str:
    text = json.dumps(doc, allow_nan=True).replace('"@DEEP@"', "[" * 50_000 + "]" * 50_000)
    return text[:cut] if cut is not None else text


@st.composite
def _path(draw: st.DrawFn, doc: Any) -> tuple[Any, ...]:
    """A walk down from the top, one random child a level: every level gets its share (a
    uniform pick over all leaves would almost always land in the 36 NVLink entries)."""
    at: tuple[Any, ...] = ()
    while isinstance(doc, (dict, list)) and doc and draw(st.integers(0, 4)) != 0:
        keys = list(doc) if isinstance(doc, dict) else list(range(len(doc)))
        key = keys[draw(st.integers(0, len(keys) - 1))]
        at, doc = (*at, key), doc[key]
    return at


@st.composite
def mutated(draw: st.DrawFn, seed: Any) -> str:
    path = draw(_path(seed))
    doc = _mutate(seed, path, draw(HOSTILE))
    cut = draw(st.one_of(st.none(), st.none(), st.none(), st.integers(0, 20_000)))
    return _text(doc, cut)


def _gpufleet(*args: str) -> tuple[int, bytes, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        else:
            raise AssertionError("main() returned without exiting")
    return code, out.getvalue().encode("utf-8", "surrogateescape"), err.getvalue()


def _judge(code: int, out: bytes, err: str, path: Path, fmt: str = "table") -> None:
    """Clean exit 2 naming the file, or a correct render with nothing raw from the file."""
    if code == 2:
        lines = [line for line in err.splitlines() if not line.startswith("gpufleet: run store:")]
        assert len(lines) == 1 and lines[0].startswith("gpufleet: ") and str(path) in lines[0], err
        assert not out
        return
    assert code in (0, 1), (code, err)
    assert out, err
    for raw in ESCAPES:
        assert raw not in out, (fmt, raw)
    if fmt == "json":
        json.loads(out)


SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(text=mutated(LIVE), fmt=st.sampled_from(FORMATS))
def test_saved_report_through_report_and_diff(text: str, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        _judge(*_gpufleet("report", str(path), "--format", fmt), path, fmt)
        good = Path(tmp) / "good.json"
        good.write_text(json.dumps(LIVE))
        _judge(*_gpufleet("diff", str(good), str(path)), path)


@SETTINGS
@given(text=mutated(LIVE), fmt=st.sampled_from(("table", "json")))
def test_saved_report_in_a_store_through_history_and_report_store(text: str, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs"
        store.mkdir()
        older = json.loads(json.dumps(LIVE))
        older["generated_at"] = "2026-11-29T00:00:00Z"
        (store / "gpufleet-2026-11-29T000000Z.json").write_text(json.dumps(older))
        planted = store / "gpufleet-2026-11-30T015000Z.json"
        planted.write_text(text, encoding="utf-8", errors="surrogateescape")
        code, out, err = _gpufleet("history", "--store", str(store), "--format", fmt)
        if code == 2:  # the only runs left are unreadable, or the latest run is
            assert "gpufleet: " in err and "Traceback" not in err, err
        else:
            _judge(code, out, err, planted, fmt)
        good = Path(tmp) / "good.json"
        good.write_text(json.dumps(LIVE))
        _judge(*_gpufleet("report", str(good), "--store", str(store), "--format", fmt),
               good, fmt)


_TREE = {p.name: json.loads(p.read_text()) for p in sorted((ANSIBLE / "tree").iterdir())}
_EVENTS = {p.name: json.loads(p.read_text())
           for p in sorted((ANSIBLE / "job_events").iterdir())}


@SETTINGS
@given(data=st.data(), which=st.sampled_from(("tree", "job_events")),
       fmt=st.sampled_from(("table", "json", "html")))
def test_ansible_results_through_ansible_report(data: st.DataObject, which: str,
                                                fmt: str) -> None:
    files = _TREE if which == "tree" else _EVENTS
    name = data.draw(st.sampled_from(sorted(files)))
    text = data.draw(mutated(files[name]))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / which
        shutil.copytree(ANSIBLE / which, root)
        (root / name).write_text(text, encoding="utf-8", errors="surrogateescape")
        code, out, err = _gpufleet("ansible-report", str(root), "--format", fmt)
        if code == 2:
            assert str(root) in err and len(err.splitlines()) == 1, err
            assert "Traceback" not in err
        else:
            _judge(code, out, err, root, fmt)
