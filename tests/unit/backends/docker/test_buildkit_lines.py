"""BuildKit's registry lookup of a local base image is not shown as a failure; every line
shown is printable."""

from __future__ import annotations

from envforge.backends.docker.buildkit_lines import (
    HeldNoise,
    base_stopped,
    failure_reason,
    plain,
)

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


def test_a_plain_has_no_terminal_sequence_and_escapes_other_controls() -> None:
    assert plain("\x1b[31mwarning\x1b[0m: bell\x07") == "warning: bell\\x07"
    assert plain("#4 0.51 \x1b[2K\rGet:1 x") == "#4 0.51 \\rGet:1 x"
    assert plain("#3 [torch 1/5] FROM base") == "#3 [torch 1/5] FROM base"


def test_what_is_shown_passed_and_held_is_printable() -> None:
    noise = HeldNoise()
    assert noise.feed("#5 1.0 \x1b[1mbold\x1b[0m") == ["#5 1.0 bold"]
    assert noise.feed(f"#2 [internal] load metadata for {BASE}") == [
        f"#2 [internal] load metadata for {BASE}"
    ]
    assert noise.feed("#2 ERROR: not found\x07") == []
    assert noise.finish(ok=False) == ["#2 ERROR: not found\\x07"]


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


#: BuildKit's plain output for an unreachable base image, as a CI run printed it: the
#: metadata vertex is cancelled when the solve fails, so no ``#3 ERROR`` names it.
UNREACHABLE_BASE = [
    "#1 [internal] load build definition from Dockerfile",
    "#1 DONE 0.0s",
    "#3 [internal] load metadata for 127.0.0.1:1/envforge-nope:t",
    "#3 CANCELED",
    "failed to solve with frontend dockerfile.v0: failed to create LLB definition: failed to"
    ' do request: Head "http://127.0.0.1:1/v2/envforge-nope/manifests/t": dial tcp'
    " 127.0.0.1:1: connect: connection refused",
]


def test_a_cancelled_base_vertex_is_the_base_image_failing() -> None:
    assert base_stopped("the build", None, {3}, UNREACHABLE_BASE)
    assert failure_reason(UNREACHABLE_BASE).startswith("failed to solve with frontend")


def test_a_failing_step_is_the_recipes_own_failure() -> None:
    assert base_stopped("step FROM x AS torch", (5, "boom"), {3}, [])
    assert base_stopped("step RUN x", (3, "not found"), {3}, [])  # the base vertex errored
    assert not base_stopped("step RUN pip install", (7, "exit 1"), {3}, UNREACHABLE_BASE)
    # another vertex cancelled (a step stopped because a sibling failed): not the base
    assert not base_stopped("the build", None, {3}, ["#9 CANCELED", "ERROR: exit 1"])
    assert failure_reason(["#9 CANCELED", "ERROR: exit 1"]) == "ERROR: exit 1"
    assert failure_reason(["#1 DONE 0.0s"]) == "no image"
