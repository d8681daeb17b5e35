"""Build output: plain lines for logs, a progress display for people on a TTY."""

from __future__ import annotations

import io

from envforge.cli.display import BuildDisplay


def test_plain_lines_when_not_a_tty() -> None:
    out = io.StringIO()
    display = BuildDisplay(out, tty=False)
    for line in ("Step 1/2 : FROM x", " ---> abc", "Collecting numpy"):
        display(line)
    display.close()
    assert out.getvalue() == "Step 1/2 : FROM x\n ---> abc\nCollecting numpy\n"
    assert "\x1b" not in out.getvalue()


def test_tty_keeps_step_lines_and_overwrites_the_rest() -> None:
    out = io.StringIO()
    display = BuildDisplay(out, tty=True)
    display("Step 1/2 : FROM x")
    display("Collecting numpy")
    display("Downloading numpy (16 MB)")
    display("Step 2/2 : RUN true")
    display.close()
    text = out.getvalue()
    kept = [ln for ln in text.split("\n") if "Step " in ln]
    assert len(kept) == 2
    assert "Step 1/2 : FROM x" in kept[0]
    assert "Step 2/2 : RUN true" in kept[1]
    # Other output shares one status line, rewritten in place ("\r" + erase line).
    assert text.count("\r\x1b[K\x1b[2m") == 2
    assert "Downloading numpy" in text
    assert text.endswith("\r\x1b[K") or text.endswith("\n")
