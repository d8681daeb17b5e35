"""BuildKit's registry lookup of a local base image is not shown as a failure."""

from __future__ import annotations

from envforge.backends.docker.buildkit_lines import HeldNoise

BASE = "docker.io/envforge-standin/debian:bookworm-python3"
#: BuildKit's plain progress for a base image only this engine has (empty lines dropped,
#: as the build loop drops them).
LOOKUP = [
    "#1 [internal] load build definition from Dockerfile",
    "#1 transferring dockerfile: 1.23kB done",
    "#1 DONE 0.0s",
    f"#2 [internal] load metadata for {BASE}",
    "#2 ERROR: not found",
    "------",
    f" > [internal] load metadata for {BASE}:",
    "------",
    f"#3 [torch 1/5] FROM {BASE}",
    "#3 DONE 0.0s",
    "#4 [torch 2/5] RUN python3 -m pip install torch",
    "#4 DONE 41.2s",
]


def shown(lines: list[str], ok: bool) -> list[str]:
    noise = HeldNoise()
    out = [s for line in lines for s in noise.feed(line)]
    return out + noise.finish(ok)


def test_a_successful_build_hides_the_lookup_and_says_what_happened() -> None:
    out = shown(LOOKUP, ok=True)
    assert "#2 ERROR: not found" not in out
    assert "------" not in out
    assert out[:4] == LOOKUP[:4]  # everything else, in its order, as it came
    assert out[4:-1] == LOOKUP[8:]
    assert out[-1].startswith(f"(BuildKit found no {BASE} in a registry and used this engine")


def test_a_failed_build_shows_the_held_lines_after_all() -> None:
    out = shown(LOOKUP[:8], ok=False)
    assert out[-4:] == ["#2 ERROR: not found", "------", LOOKUP[6], "------"]
    assert not any("used this engine's copy" in line for line in out)


def test_an_error_of_another_step_passes_through_at_once() -> None:
    noise = HeldNoise()
    assert noise.feed("#5 [torch 3/5] RUN false") == ["#5 [torch 3/5] RUN false"]
    assert noise.feed("#5 ERROR: process did not complete") == [
        "#5 ERROR: process did not complete"
    ]
    assert noise.finish(ok=False) == []


def test_a_block_that_is_not_the_lookup_is_shown_even_on_success() -> None:
    lines = ["------", " > [torch 4/5] RUN something:", "------"]
    assert shown(lines, ok=True) == lines
