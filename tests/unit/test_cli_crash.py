"""A crash inside a command exits 3 (cli.EXIT_CRASH), never 1, the findings code (issue 22 F12)."""

from __future__ import annotations

import argparse

import pytest

from gpufleet import cli


def test_an_uncaught_exception_exits_3_with_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise KeyError("gpus")

    parser = cli.build_parser()
    real = parser.parse_args

    def parse(argv: object = None) -> argparse.Namespace:
        ns = real(["facts"])
        ns.run = boom
        return ns

    monkeypatch.setattr(parser, "parse_args", parse)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    with pytest.raises(SystemExit) as exc:
        cli.main(["facts"])
    assert exc.value.code == cli.EXIT_CRASH == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'gpus'" in err
    assert "gpufleet: internal error (KeyError: 'gpus'); nothing was judged" in err
